"""Shared memory requests served at once on the engine's thread (Dispatch._shm_request through
ModelService.infer_now), with a real server and the real tritonclient clients: the same answers
as the tensors sent in the request, the same refusals as the queued way, the regions let go
after every answer and every refusal, and the way actually taken, per etrt_shm_requests_total.
A small program's executes are short, so its shared memory requests are served inline; each
carries a timeout, which keeps it off the engine's native lane (that way is
test_shared_memory_lane_e2e.py's)."""

from __future__ import annotations

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

SHAPE = (2, 4)
NBYTES = 2 * 4 * 4
OUT_SHAPE = (2, 3)  # the program's output
REQUESTS = 20
TIMEOUT_US = 30_000_000  # a request with a timeout of its own is served by the engine's Python


@pytest.fixture(scope="module")
def server(tmp_path_factory, linear_relu_program):
    artifacts = tmp_path_factory.mktemp("shm_inline") / "artifacts"
    server = serving(
        artifacts, {"lin": linear_relu_program}, "--allow-client-shm", "--workers", "1"
    )
    yield server
    server.stop()


@pytest.fixture
def region():
    """One object for the input (at 0) and the output (at 256), registered as one region."""
    name = f"r{uuid.uuid4().hex[:8]}"
    handle = shm.create_shared_memory_region(name, f"/etrt_inline_{name}", 512)
    yield name, f"/etrt_inline_{name}", handle
    shm.destroy_shared_memory_region(handle)


def names(client) -> tuple[str, str]:
    metadata = client.get_model_metadata("lin")
    if not isinstance(metadata, dict):
        metadata = client.get_model_metadata("lin", as_json=True)
    return metadata["inputs"][0]["name"], metadata["outputs"][0]["name"]


def shm_request(module, client, region: str, size=NBYTES, offset=0, out_size=NBYTES):
    input_name, output_name = names(client)
    tensor = module.InferInput(input_name, list(SHAPE), "FP32")
    tensor.set_shared_memory(region, size, offset)
    output = module.InferRequestedOutput(output_name)
    output.set_shared_memory(region, out_size, 256)
    return [tensor], [output]


def test_inline_answers_match_the_same_request_sent_with_its_tensors(server, region):
    name, key, handle = region
    rng = np.random.default_rng(7)
    http = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    try:
        http.register_system_shared_memory(name, key, 512)
        inline_before = scraped(server.url, 'etrt_shm_requests_total{path="inline"}')
        queued_before = scraped(server.url, 'etrt_shm_requests_total{path="queued"}')
        bound_before = scraped(server.url, 'etrt_shm_bound_total{kind="system"}')
        input_name, output_name = names(http)
        for _ in range(REQUESTS):
            x = rng.standard_normal(SHAPE, dtype=np.float32)
            shm.set_shared_memory_region(handle, [x])
            inputs, outputs = shm_request(httpclient, http, name)
            answered = http.infer("lin", inputs, outputs=outputs, timeout=TIMEOUT_US)
            answered = answered.get_output(output_name)
            assert answered["parameters"]["shared_memory_region"] == name
            assert answered["shape"] == list(OUT_SHAPE)
            y = shm.get_contents_as_numpy(handle, np.float32, list(OUT_SHAPE), offset=256)
            tensor = httpclient.InferInput(input_name, list(SHAPE), "FP32")
            tensor.set_data_from_numpy(x)
            sent = http.infer("lin", [tensor]).as_numpy(output_name)
            np.testing.assert_array_equal(y, sent)
        inline = scraped(server.url, 'etrt_shm_requests_total{path="inline"}') - inline_before
        queued = scraped(server.url, 'etrt_shm_requests_total{path="queued"}') - queued_before
        assert inline + queued == REQUESTS
        # The program's executes are microseconds: at most one after a preempted one is queued.
        assert inline >= REQUESTS // 2, (inline, queued)
        # Each request: the input viewed in the region, the output written there by the host.
        bound = scraped(server.url, 'etrt_shm_bound_total{kind="system"}') - bound_before
        assert bound == 2 * REQUESTS
        http.unregister_system_shared_memory(name)  # no request still holds it
    finally:
        http.close()


def test_inline_refusals_name_the_region_and_let_it_go(server, region):
    name, key, _ = region
    http = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    try:
        http.register_system_shared_memory(name, key, 512)
        inputs, outputs = shm_request(httpclient, http, name)
        http.infer("lin", inputs, outputs=outputs, timeout=TIMEOUT_US)  # executes seen short
        inline_before = scraped(server.url, 'etrt_shm_requests_total{path="inline"}')
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
            for module, client in ((httpclient, http), (grpcclient, grpc)):
                cases = [
                    (dict(region="nowhere"), ["'nowhere'", "no shared memory region"]),
                    (dict(region=name, offset=500), [name, "past the end"]),
                    (dict(region=name, size=NBYTES - 4), [name, "does not match"]),
                    (dict(region=name, out_size=8), [name, "needs"]),
                ]
                for spec, words in cases:
                    inputs, outputs = shm_request(module, client, **spec)
                    with pytest.raises(InferenceServerException) as caught:
                        client.infer("lin", inputs, outputs=outputs, timeout=TIMEOUT_US)
                    message = caught.value.message()
                    assert all(word in message for word in words), (spec, message)
                    assert caught.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
                inputs, outputs = shm_request(module, client, name)
                client.infer("lin", inputs, outputs=outputs, timeout=TIMEOUT_US)  # still serves
        # The output too large for its window was executed inline, then refused.
        assert scraped(server.url, 'etrt_shm_requests_total{path="inline"}') > inline_before
        http.unregister_system_shared_memory(name)  # every refusal let the region go
    finally:
        http.close()
