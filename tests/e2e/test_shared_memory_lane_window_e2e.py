"""An output asked into a system shared memory window smaller than its upper bound (a dynamic
batch dimension: the window holds this request's rows, the bound the most rows), with real
servers and clients: the engine's native lane runs such a request and copies the output into
the window when it fits; when it does not, the request ran, and the refusal is the engine's
Python's, the same body over HTTP and gRPC as a server whose lane takes no route (with
--access-log) answers, counted the same in the model's statistics."""

from __future__ import annotations

import json
import uuid

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from support.program_fixtures import dynamic_batch_program  # noqa: F401
from support.prometheus import parse, scraped, series
from support.server import ServerProcess, upload

FEATURES, OUT_FEATURES = 4, 3  # [rows, 4] -> [rows, 3], rows up to 16 (a bound of 192 bytes)
WINDOW = 2 * OUT_FEATURES * 4  # two rows' output
LANE = 'etrt_shm_requests_total{path="lane"}'


def _serve(tmp_path_factory, program, *args: str) -> ServerProcess:
    root = tmp_path_factory.mktemp("shm_window") / "artifacts"
    server = ServerProcess(root, "--allow-client-shm", "--workers", "2", *args).start()
    with server.client() as client:
        response = upload(client, "dyn", program.pte, program.ptds)
        assert response.status_code == 201, response.text
    return server


@pytest.fixture(scope="module")
def servers(tmp_path_factory, dynamic_batch_program):  # noqa: F811
    """The lane's server, and one whose requests all take the engine's Python path."""
    lane = _serve(tmp_path_factory, dynamic_batch_program)
    python = _serve(tmp_path_factory, dynamic_batch_program, "--access-log")
    yield lane, python
    lane.stop()
    python.stop()


@pytest.fixture
def region(servers):
    """One object, registered on both servers: the input at 0, the output's window at 256."""
    name = f"w{uuid.uuid4().hex[:8]}"
    key = f"/etrt_window_{name}"
    handle = shm.create_shared_memory_region(name, key, 1024)
    for server in servers:
        with server.client() as client:
            body = {"key": key, "offset": 0, "byte_size": 1024}
            response = client.post(f"/v2/systemsharedmemory/region/{name}/register", json=body)
            assert response.status_code == 200, response.text
    yield name, handle
    for server in servers:
        with server.client() as client:
            client.post(f"/v2/systemsharedmemory/region/{name}/unregister")
    shm.destroy_shared_memory_region(handle)


def _names(server) -> tuple[str, str]:
    with server.client() as client:
        metadata = client.get("/v2/models/dyn").json()
    return metadata["inputs"][0]["name"], metadata["outputs"][0]["name"]


def _body(server, region: str, rows: int) -> dict:
    """The v2 JSON request: `rows` rows at 0 in the region, the output into WINDOW at 256."""
    input_name, output_name = _names(server)
    place = {"shared_memory_region": region, "shared_memory_byte_size": rows * FEATURES * 4}
    window = {
        "shared_memory_region": region,
        "shared_memory_byte_size": WINDOW,
        "shared_memory_offset": 256,
    }
    return {
        "inputs": [
            {"name": input_name, "shape": [rows, FEATURES], "datatype": "FP32", "parameters": place}
        ],
        "outputs": [{"name": output_name, "parameters": window}],
    }


def _grpc(server, region: str, rows: int):
    """The same request over gRPC: the refusal's status and message."""
    input_name, output_name = _names(server)
    tensor = grpcclient.InferInput(input_name, [rows, FEATURES], "FP32")
    tensor.set_shared_memory(region, rows * FEATURES * 4)
    output = grpcclient.InferRequestedOutput(output_name)
    output.set_shared_memory(region, WINDOW, 256)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as caught:
            client.infer("dyn", [tensor], outputs=[output])
    return caught.value.status(), caught.value.message()


def _lane_served(server) -> float:
    with server.client() as client:
        found = series(parse(client.get("/metrics").text), "etrt_engine_lane_requests_total")
    return sum(n for labels, n in found.items() if dict(labels)["model"] == "dyn")


def _inferences(server) -> tuple[int, int]:
    """(successes, failures) in the model's statistics."""
    with server.client() as client:
        stats = client.get("/v2/models/dyn/stats").json()["model_stats"][0]["inference_stats"]
    return stats["success"]["count"], stats["fail"]["count"]


def test_an_output_that_fits_its_window_is_copied_there_by_the_lane(servers, region):
    lane, _ = servers
    name, handle = region
    rng = np.random.default_rng(5)
    http = httpclient.InferenceServerClient(lane.url.removeprefix("http://"))
    input_name, output_name = _names(lane)
    before = scraped(lane.url, LANE)
    requests = 10
    for index in range(requests):
        rows = 1 + index % 2
        x = rng.standard_normal((rows, FEATURES), dtype=np.float32)
        shm.set_shared_memory_region(handle, [x])
        tensor = httpclient.InferInput(input_name, [rows, FEATURES], "FP32")
        tensor.set_data_from_numpy(x)
        expected = http.infer("dyn", [tensor]).as_numpy(output_name)  # also: executes seen short
        response = httpx.post(f"{lane.url}/v2/models/dyn/infer", json=_body(lane, name, rows))
        assert response.status_code == 200, response.text
        [output] = response.json()["outputs"]
        assert output["parameters"]["shared_memory_byte_size"] == rows * OUT_FEATURES * 4
        y = shm.get_contents_as_numpy(handle, np.float32, [rows, OUT_FEATURES], offset=256)
        np.testing.assert_array_equal(y, expected)
    http.close()
    # Served by the lane (only a preempted execute leaves one to Python).
    assert scraped(lane.url, LANE) - before >= requests // 2


def test_an_output_that_outgrows_its_window_is_refused_as_the_python_path_refuses_it(
    servers, region
):
    name, handle = region
    shm.set_shared_memory_region(handle, [np.ones((3, FEATURES), np.float32)])
    answers = []
    for server in servers:
        # Executes seen short first, so that the lane's server runs the next ones there.
        assert httpx.post(
            f"{server.url}/v2/models/dyn/infer", json=_body(server, name, 2)
        ).is_success
        lane_before, counted_before = _lane_served(server), _inferences(server)
        bound_before = scraped(server.url, 'etrt_shm_bound_total{kind="system"}')
        response = httpx.post(f"{server.url}/v2/models/dyn/infer", json=_body(server, name, 3))
        refused_grpc = _grpc(server, name, 3)
        counted = tuple(a - b for a, b in zip(_inferences(server), counted_before, strict=True))
        bound = scraped(server.url, 'etrt_shm_bound_total{kind="system"}') - bound_before
        answers.append(
            ((response.status_code, response.content), refused_grpc, counted, bound,
             _lane_served(server) - lane_before)
        )  # fmt: skip
    (lane, python) = answers
    assert lane[:4] == python[:4]  # the same bodies, statistics and shared memory counts
    status, body = lane[0]
    assert status == 400
    message = json.loads(body)["error"]
    assert message == (
        f"output {_names(servers[0])[1]!r} needs 36 bytes, more than its "
        f"shared_memory_byte_size {WINDOW} in region {name!r}"
    )
    assert lane[1] == ("StatusCode.INVALID_ARGUMENT", message)
    assert lane[4] >= 1 and python[4] == 0  # run by the lane (each once), worded by Python
