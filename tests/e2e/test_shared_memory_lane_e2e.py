"""Shared memory requests served by the engine's native lane (runtime_ext/lane/, without the
engine's Python), with a real server of two fronts and the real tritonclient clients: the same
answers as the tensors sent in the request, over HTTP and gRPC; the way taken, per
etrt_shm_requests_total{path="lane"}; every refusal still Python's (the lane declines before
anything runs), with the same messages; and unregister racing requests in flight: each answered
as done or 409, each request as served or 400, never a crash or a wrong answer."""

from __future__ import annotations

import threading
import time
import uuid

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from support.program_fixtures import linear_relu_program  # noqa: F401
from support.prometheus import scraped
from support.server import ServerProcess, serving, upload

SHAPE, OUT_SHAPE = (2, 4), (2, 3)
NBYTES, OUT_BYTES = 2 * 4 * 4, 2 * 3 * 4
REQUESTS = 20
LANE = 'etrt_shm_requests_total{path="lane"}'


@pytest.fixture(scope="module")
def server(tmp_path_factory, linear_relu_program):
    artifacts = tmp_path_factory.mktemp("shm_lane") / "artifacts"
    server = serving(
        artifacts, {"lin": linear_relu_program}, "--allow-client-shm", "--workers", "2"
    )
    yield server
    server.stop()


@pytest.fixture
def region():
    """One object: the input at 0, outputs at 256, 512 and 768."""
    name = f"l{uuid.uuid4().hex[:8]}"
    key = f"/etrt_lane_{name}"
    handle = shm.create_shared_memory_region(name, key, 1024)
    yield name, key, handle
    shm.destroy_shared_memory_region(handle)


def names(client) -> tuple[str, str]:
    metadata = client.get_model_metadata("lin")
    if not isinstance(metadata, dict):
        metadata = client.get_model_metadata("lin", as_json=True)
    return metadata["inputs"][0]["name"], metadata["outputs"][0]["name"]


def shm_request(module, client, region, size=NBYTES, offset=0, out_size=OUT_BYTES, out_at=256):
    input_name, output_name = names(client)
    tensor = module.InferInput(input_name, list(SHAPE), "FP32")
    tensor.set_shared_memory(region, size, offset)
    output = module.InferRequestedOutput(output_name)
    output.set_shared_memory(region, out_size, out_at)
    return [tensor], [output]


def region_of(output) -> str:
    """The region an answer's output names (HTTP's JSON, or gRPC's message)."""
    if isinstance(output, dict):
        return output["parameters"]["shared_memory_region"]
    return output.parameters["shared_memory_region"].string_param


def sent(module, client, x: np.ndarray) -> np.ndarray:
    """The answer to the same request with its tensor in the request."""
    input_name, output_name = names(client)
    tensor = module.InferInput(input_name, list(SHAPE), "FP32")
    tensor.set_data_from_numpy(x)
    return client.infer("lin", [tensor]).as_numpy(output_name)


@pytest.fixture
def clients(server):
    http = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        yield ((httpclient, http), (grpcclient, grpc))
    http.close()


def test_the_lane_answers_as_the_tensors_sent_in_the_request(server, region, clients):
    name, key, handle = region
    rng = np.random.default_rng(11)
    (_, http), _ = clients
    http.register_system_shared_memory(name, key, 1024)
    for module, client in clients:
        sent(module, client, np.zeros(SHAPE, np.float32))  # executes seen short
        before = scraped(server.url, LANE)
        bound_before = scraped(server.url, 'etrt_shm_bound_total{kind="system"}')
        for _ in range(REQUESTS):
            x = rng.standard_normal(SHAPE, dtype=np.float32)
            shm.set_shared_memory_region(handle, [x])
            inputs, outputs = shm_request(module, client, name)
            answer = client.infer("lin", inputs, outputs=outputs)
            assert region_of(answer.get_output(names(client)[1])) == name
            y = shm.get_contents_as_numpy(handle, np.float32, list(OUT_SHAPE), offset=256)
            np.testing.assert_array_equal(y, sent(module, client, x))
        lane = scraped(server.url, LANE) - before
        # The program's executes are microseconds: only a preempted one leaves it to Python.
        assert lane >= REQUESTS // 2, (module.__name__, lane)
        bound = scraped(server.url, 'etrt_shm_bound_total{kind="system"}') - bound_before
        assert bound >= 2 * lane  # the input read and the output written in the region
    http.unregister_system_shared_memory(name)  # no request still holds it


def test_refusals_are_pythons_with_the_same_messages(server, region, clients):
    name, key, _ = region
    (_, http), _ = clients
    http.register_system_shared_memory(name, key, 1024)
    for module, client in clients:
        inputs, outputs = shm_request(module, client, name)
        client.infer("lin", inputs, outputs=outputs)
        cases = [
            (dict(region="nowhere"), ["'nowhere'", "no shared memory region"]),
            (dict(region=name, offset=1000), [name, "past the end"]),
            (dict(region=name, size=NBYTES - 4), [name, "does not match"]),
            (dict(region=name, out_size=8), [name, "needs"]),
        ]
        before = scraped(server.url, LANE)
        for spec, words in cases:
            inputs, outputs = shm_request(module, client, **spec)
            with pytest.raises(InferenceServerException) as caught:
                client.infer("lin", inputs, outputs=outputs)
            message = caught.value.message()
            assert all(word in message for word in words), (spec, message)
            assert caught.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
        assert scraped(server.url, LANE) == before  # every one declined, none executed there
    http.unregister_system_shared_memory(name)  # no refusal kept the region


def test_unregister_racing_lane_requests_is_done_or_409(server, region, clients):
    name, key, handle = region
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(SHAPE)
    shm.set_shared_memory_region(handle, [x])
    (_, http), (_, grpc) = clients
    expected = sent(httpclient, http, x)
    http.register_system_shared_memory(name, key, 1024)
    before = scraped(server.url, LANE)
    stop, outcomes, lock = threading.Event(), [], threading.Lock()

    def hammer(module, out_at):
        client = (
            httpclient.InferenceServerClient(server.url.removeprefix("http://"))
            if module is httpclient
            else grpcclient.InferenceServerClient(server.grpc_url)
        )
        try:
            while not stop.is_set():
                inputs, outputs = shm_request(module, client, name, out_at=out_at)
                try:
                    client.infer("lin", inputs, outputs=outputs)
                    y = shm.get_contents_as_numpy(handle, np.float32, list(OUT_SHAPE), out_at)
                    outcome = "served" if np.array_equal(y, expected) else "wrong"
                except InferenceServerException as exc:
                    unknown = f"no shared memory region is named '{name}'" in exc.message()
                    outcome = "unknown" if unknown else f"{exc.status()} {exc.message()}"
                with lock:
                    outcomes.append(outcome)
        finally:
            client.close()

    threads = [
        threading.Thread(target=hammer, args=(httpclient, 512)),
        threading.Thread(target=hammer, args=(grpcclient, 768)),
    ]
    for thread in threads:
        thread.start()
    unregisters = []
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            http.unregister_system_shared_memory(name)
            unregisters.append("done")
            http.register_system_shared_memory(name, key, 1024)
        except InferenceServerException as exc:
            assert exc.status() == "409" and "in use by" in exc.message(), exc.message()
            unregisters.append("409")
    stop.set()
    for thread in threads:
        thread.join(30)
    assert set(outcomes) <= {"served", "unknown"}, set(outcomes)
    assert outcomes.count("served") > 0 and "done" in unregisters
    assert scraped(server.url, LANE) > before
    print(
        f"{len(outcomes)} requests: {outcomes.count('unknown')} after an unregister; "
        f"unregisters: {unregisters.count('done')} done, {unregisters.count('409')} 409"
    )
    grpc.unregister_system_shared_memory(name)  # nothing left holding it
