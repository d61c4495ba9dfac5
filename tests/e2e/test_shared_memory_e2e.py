"""Triton's system shared memory extension end to end: a real server (front + engine
processes), the real, unmodified tritonclient http and grpc clients and their shared memory
utilities, every hostile region the issue lists, and the switch that keeps it all off."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import uuid

import httpx
import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from support.program_fixtures import (  # noqa: F401
    dynamic_batch_program,
    image_program,
    linear_relu_program,
)
from support.prometheus import scraped
from support.server import ServerProcess, upload

IMAGE = (1, 3, 224, 224)
IMAGE_BYTES = int(np.prod(IMAGE)) * 4


def eager(program, *arrays):
    with torch.no_grad():
        return program.module(*(torch.from_numpy(a) for a in arrays)).numpy()


@pytest.fixture(scope="module")
def server(tmp_path_factory, image_program, linear_relu_program, dynamic_batch_program):
    server = ServerProcess(
        tmp_path_factory.mktemp("shm") / "artifacts",
        "--allow-client-shm",
        "--shm-max-regions",
        "6",
        "--workers",
        "1",
    ).start()
    with server.client() as client:
        for name, program in (("img", image_program), ("lin", linear_relu_program)):
            response = upload(client, name, program.pte, program.ptds)
            assert response.status_code == 201, response.text
        # A request to this one waits in the batching queue for up to 3 s (a region in use).
        held = {"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 3000000}}
        fields = {"config": json.dumps(held)}
        response = upload(client, "held", dynamic_batch_program.pte, fields=fields)
        assert response.status_code == 201, response.text
    yield server
    server.stop()


@pytest.fixture
def http(server):
    client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    yield client
    client.unregister_system_shared_memory()
    client.close()


@pytest.fixture
def grpc(server):
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        yield client


class Regions:
    """Shared memory objects created with tritonclient's utility, destroyed after the test."""

    def __init__(self):
        self.handles = []

    def create(self, nbytes: int, name: str | None = None):
        name = name or f"r{uuid.uuid4().hex[:8]}"
        handle = shm.create_shared_memory_region(name, f"/etrt_test_{name}", nbytes)
        self.handles.append(handle)
        return name, f"/etrt_test_{name}", handle

    def close(self):
        for handle in self.handles:
            try:
                shm.destroy_shared_memory_region(handle)
            except Exception:  # already destroyed by the test (unlinked mid-request)
                pass


@pytest.fixture
def regions():
    made = Regions()
    yield made
    made.close()


def image_request(module, in_region, out_region, offset=0):
    tensor = module.InferInput("input_0", list(IMAGE), "FP32")
    tensor.set_shared_memory(in_region, IMAGE_BYTES, offset)
    output = module.InferRequestedOutput("output_0")
    output.set_shared_memory(out_region, IMAGE_BYTES)
    return [tensor], [output]


def test_http_inputs_and_outputs_through_system_shm_match_eager(http, regions, image_program):
    x = np.random.default_rng(0).standard_normal(IMAGE, dtype=np.float32)
    name_in, key_in, h_in = regions.create(IMAGE_BYTES)
    name_out, key_out, h_out = regions.create(IMAGE_BYTES)
    shm.set_shared_memory_region(h_in, [x])
    http.register_system_shared_memory(name_in, key_in, IMAGE_BYTES)
    http.register_system_shared_memory(name_out, key_out, IMAGE_BYTES)
    inputs, outputs = image_request(httpclient, name_in, name_out)
    result = http.infer("img", inputs, outputs=outputs)
    # The answer carries no bytes for the output: they are in the region.
    answered = result.get_output("output_0")
    assert "data" not in answered and "binary_data_size" not in answered["parameters"]
    assert answered["shape"] == list(IMAGE)
    assert answered["parameters"]["shared_memory_region"] == name_out
    y = shm.get_contents_as_numpy(h_out, np.float32, list(IMAGE))
    np.testing.assert_allclose(y, eager(image_program, x), rtol=1e-6)


def test_grpc_inputs_and_outputs_through_system_shm_match_eager(
    http, grpc, regions, linear_relu_program
):
    x = np.random.default_rng(1).standard_normal((2, 4), dtype=np.float32)
    expected = eager(linear_relu_program, x)
    name_in, key_in, h_in = regions.create(x.nbytes)
    name_out, key_out, h_out = regions.create(expected.nbytes)
    shm.set_shared_memory_region(h_in, [x])
    grpc.register_system_shared_memory(name_in, key_in, x.nbytes)
    grpc.register_system_shared_memory(name_out, key_out, expected.nbytes)
    metadata = grpc.get_model_metadata("lin", as_json=True)
    tensor = grpcclient.InferInput(metadata["inputs"][0]["name"], [2, 4], "FP32")
    tensor.set_shared_memory(name_in, x.nbytes)
    output = grpcclient.InferRequestedOutput(metadata["outputs"][0]["name"])
    output.set_shared_memory(name_out, expected.nbytes)
    result = grpc.infer("lin", [tensor], outputs=[output])
    assert not result.get_response().raw_output_contents
    y = shm.get_contents_as_numpy(h_out, np.float32, list(expected.shape))
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_input_in_shm_output_in_the_answer_and_the_reverse(http, grpc, regions, image_program):
    x = np.random.default_rng(2).standard_normal(IMAGE, dtype=np.float32)
    name_in, key_in, h_in = regions.create(IMAGE_BYTES)
    shm.set_shared_memory_region(h_in, [x])
    http.register_system_shared_memory(name_in, key_in, IMAGE_BYTES)
    tensor = httpclient.InferInput("input_0", list(IMAGE), "FP32")
    tensor.set_shared_memory(name_in, IMAGE_BYTES)
    result = http.infer("img", [tensor])
    np.testing.assert_allclose(result.as_numpy("output_0"), eager(image_program, x), rtol=1e-6)
    # gRPC: the input in the request, the output into the same region.
    z = np.random.default_rng(3).standard_normal(IMAGE, dtype=np.float32)
    tensor = grpcclient.InferInput("input_0", list(IMAGE), "FP32")
    tensor.set_data_from_numpy(z)
    output = grpcclient.InferRequestedOutput("output_0")
    output.set_shared_memory(name_in, IMAGE_BYTES)
    grpc.infer("img", [tensor], outputs=[output])
    y = shm.get_contents_as_numpy(h_in, np.float32, list(IMAGE))
    np.testing.assert_allclose(y, eager(image_program, z), rtol=1e-6)


def test_status_lists_regions_and_unregister_releases_them(http, grpc, regions):
    name_a, key_a, _ = regions.create(4096)
    name_b, key_b, _ = regions.create(8192)
    http.register_system_shared_memory(name_a, key_a, 1024, offset=512)
    grpc.register_system_shared_memory(name_b, key_b, 8192)
    listed = {r["name"]: r for r in http.get_system_shared_memory_status()}
    assert listed[name_a] == {"name": name_a, "key": key_a, "offset": 512, "byte_size": 1024}
    assert listed[name_b]["byte_size"] == 8192
    over_grpc = grpc.get_system_shared_memory_status(as_json=True)["regions"]
    assert set(over_grpc) == {name_a, name_b}
    assert http.get_system_shared_memory_status(name_a) == [listed[name_a]]
    grpc.unregister_system_shared_memory(name_a)
    assert [r["name"] for r in http.get_system_shared_memory_status()] == [name_b]
    http.unregister_system_shared_memory()
    assert http.get_system_shared_memory_status() == []
    # Released: the name can be registered again.
    http.register_system_shared_memory(name_a, key_a, 1024)


def test_metadata_lists_both_extensions(http, grpc):
    for extensions in (
        http.get_server_metadata()["extensions"],
        grpc.get_server_metadata(as_json=True)["extensions"],
    ):
        assert {"system_shared_memory", "cuda_shared_memory"} <= set(extensions)


def _raw_register(server, name, body):
    return httpx.post(f"{server.url}/v2/systemsharedmemory/region/{name}/register", json=body)


@pytest.mark.parametrize(
    "key",
    ["/../x", "", "/a\x00b", "/" + "k" * 300, "/dir/name", "..", "/"],
    ids=["dotdot", "empty", "nul", "too-long", "slash", "bare-dotdot", "root"],
)
def test_a_key_that_is_not_a_posix_shm_name_is_refused_naming_the_region(server, key):
    response = _raw_register(server, "bad_key", {"key": key, "offset": 0, "byte_size": 64})
    assert response.status_code == 400, response.text
    assert "bad_key" in response.json()["error"]
    assert "POSIX shm name" in response.json()["error"]


def test_a_key_that_names_no_object_is_404_naming_the_region(server):
    response = _raw_register(
        server, "ghost", {"key": f"/etrt_missing_{uuid.uuid4().hex}", "byte_size": 64}
    )
    assert response.status_code == 404 and "ghost" in response.json()["error"]


def test_a_byte_size_larger_than_the_object_is_refused(http, grpc, regions):
    name, key, _ = regions.create(4096)
    for register in (http.register_system_shared_memory, grpc.register_system_shared_memory):
        with pytest.raises(InferenceServerException) as caught:
            register(name, key, 4097)
        assert name in caught.value.message() and "past the end" in caught.value.message()
        with pytest.raises(InferenceServerException) as caught:
            register(name, key, 4000, offset=100)
        assert "4096 bytes" in caught.value.message()
    assert http.get_system_shared_memory_status() == []


def test_a_window_past_the_region_and_a_wrong_size_are_refused_at_infer(http, grpc, regions):
    name, key, _ = regions.create(IMAGE_BYTES + 4096)
    http.register_system_shared_memory(name, key, IMAGE_BYTES)
    for module, client in ((httpclient, http), (grpcclient, grpc)):
        inputs, _ = image_request(module, name, name, offset=256)
        with pytest.raises(InferenceServerException) as caught:
            client.infer("img", inputs)
        assert name in caught.value.message() and "past the end" in caught.value.message()
        assert caught.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
        tensor = module.InferInput("input_0", list(IMAGE), "FP32")
        tensor.set_shared_memory(name, IMAGE_BYTES - 4)
        with pytest.raises(InferenceServerException) as caught:
            client.infer("img", [tensor])
        assert name in caught.value.message() and "does not match" in caught.value.message()
        # An output larger than its window in the region.
        x = np.zeros(IMAGE, np.float32)
        tensor = module.InferInput("input_0", list(IMAGE), "FP32")
        tensor.set_data_from_numpy(x)
        output = module.InferRequestedOutput("output_0")
        output.set_shared_memory(name, 1024)
        with pytest.raises(InferenceServerException) as caught:
            client.infer("img", [tensor], outputs=[output])
        assert name in caught.value.message() and "needs" in caught.value.message()


def test_an_unknown_region_is_refused_naming_it(http, grpc):
    for module, client in ((httpclient, http), (grpcclient, grpc)):
        inputs, _ = image_request(module, "nowhere", "nowhere")
        with pytest.raises(InferenceServerException) as caught:
            client.infer("img", inputs)
        assert "'nowhere'" in caught.value.message()
        with pytest.raises(InferenceServerException) as caught:
            client.get_system_shared_memory_status("nowhere")
        assert "'nowhere'" in caught.value.message()
        with pytest.raises(InferenceServerException) as caught:
            client.unregister_system_shared_memory("nowhere")
        assert "'nowhere'" in caught.value.message()


def test_a_client_that_unlinks_its_region_keeps_getting_answers(http, regions, image_program):
    x = np.random.default_rng(4).standard_normal(IMAGE, dtype=np.float32)
    name, key, handle = regions.create(IMAGE_BYTES * 2)
    shm.set_shared_memory_region(handle, [x])
    http.register_system_shared_memory(name, key, IMAGE_BYTES * 2)
    os.unlink(f"/dev/shm/{key.lstrip('/')}")  # gone from the namespace; the engine's mapping stays
    inputs, outputs = image_request(httpclient, name, name)
    outputs[0].set_shared_memory(name, IMAGE_BYTES, IMAGE_BYTES)
    for _ in range(3):
        http.infer("img", inputs, outputs=outputs)
    y = shm.get_contents_as_numpy(handle, np.float32, list(IMAGE), offset=IMAGE_BYTES)
    np.testing.assert_allclose(y, eager(image_program, x), rtol=1e-6)


def test_a_client_that_shrinks_its_object_is_refused_not_crashed(http, regions):
    name, key, _ = regions.create(IMAGE_BYTES)
    http.register_system_shared_memory(name, key, IMAGE_BYTES)
    os.truncate(f"/dev/shm/{key.lstrip('/')}", 1024)
    inputs, _ = image_request(httpclient, name, name)
    with pytest.raises(InferenceServerException) as caught:
        http.infer("img", inputs)
    assert name in caught.value.message() and "shrank" in caught.value.message()
    assert http.is_server_live() and http.is_model_ready("img")


def test_a_misaligned_input_is_copied_and_counted(server, http, regions, image_program):
    x = np.random.default_rng(5).standard_normal(IMAGE, dtype=np.float32)
    name, key, handle = regions.create(IMAGE_BYTES + 4096)
    shm.set_shared_memory_region(handle, [x], offset=16)

    def misaligned_copies() -> float:
        return scraped(server.url, 'etrt_shm_copies_total{kind="system",reason="misaligned"}')

    before = misaligned_copies()
    http.register_system_shared_memory(name, key, IMAGE_BYTES + 4096)
    inputs, _ = image_request(httpclient, name, name, offset=16)
    result = http.infer("img", inputs)
    np.testing.assert_allclose(result.as_numpy("output_0"), eager(image_program, x), rtol=1e-6)
    assert misaligned_copies() == before + 1
    inputs, _ = image_request(httpclient, name, name, offset=256)  # aligned: no copy
    http.infer("img", inputs)
    assert misaligned_copies() == before + 1
    assert 'etrt_shm_regions{kind="system"} 1' in httpx.get(f"{server.url}/metrics").text


def test_the_number_of_regions_is_bounded(http, regions):
    made = [regions.create(4096) for _ in range(7)]
    for name, key, _ in made[:6]:
        http.register_system_shared_memory(name, key, 4096)
    name, key, _ = made[6]
    with pytest.raises(InferenceServerException) as caught:
        http.register_system_shared_memory(name, key, 4096)
    assert name in caught.value.message() and "at most 6" in caught.value.message()
    http.unregister_system_shared_memory(made[0][0])
    http.register_system_shared_memory(name, key, 4096)


def test_registering_a_name_twice_is_a_conflict(http, regions):
    name, key, _ = regions.create(4096)
    http.register_system_shared_memory(name, key, 4096)
    with pytest.raises(InferenceServerException) as caught:
        http.register_system_shared_memory(name, key, 4096)
    assert caught.value.status() == "409" and name in caught.value.message()


def test_cuda_registration_on_a_host_without_cuda_says_so(http, grpc):
    handle = base64.b64encode(b"\x00" * 64)  # as cuda_shared_memory.get_raw_handle gives it
    for client in (http, grpc):
        with pytest.raises(InferenceServerException) as caught:
            client.register_cuda_shared_memory("gpu_region", handle, 0, 1024)
        message = caught.value.message()
        assert "gpu_region" in message and "CUDA" in message
        assert "cuda-python" in message or "no CUDA device" in message or "no usable" in message
    assert http.get_cuda_shared_memory_status() == []


def test_off_by_default_registration_is_refused_naming_the_flag(shared_server, regions):
    name, key, _ = regions.create(4096)
    http = httpclient.InferenceServerClient(shared_server.url.removeprefix("http://"))
    with grpcclient.InferenceServerClient(shared_server.grpc_url) as grpc:
        for register in (http.register_system_shared_memory, grpc.register_system_shared_memory):
            with pytest.raises(InferenceServerException) as caught:
                register(name, key, 4096)
            assert "--allow-client-shm" in caught.value.message()
            assert caught.value.status() in ("403", "StatusCode.PERMISSION_DENIED")
        with pytest.raises(InferenceServerException) as caught:
            grpc.register_cuda_shared_memory(name, base64.b64encode(b"\x00" * 64), 0, 4096)
        assert "--allow-client-shm" in caught.value.message()
    assert http.get_system_shared_memory_status() == []
    http.close()


def test_a_region_in_use_cannot_be_unregistered_until_its_request_is_answered(
    server, http, regions, dynamic_batch_program
):
    x = np.random.default_rng(8).standard_normal((1, 4), dtype=np.float32)
    name, key, handle = regions.create(4096)
    shm.set_shared_memory_region(handle, [x])
    http.register_system_shared_memory(name, key, 4096)
    tensor = httpclient.InferInput("input_0", [1, 4], "FP32")
    tensor.set_shared_memory(name, x.nbytes)
    answers = []

    def send():  # its own client: a tritonclient http client belongs to its thread
        client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
        try:
            answers.append(client.infer("held", [tensor]))
        except Exception as exc:  # reported below
            answers.append(exc)
        finally:
            client.close()

    waiting = threading.Thread(target=send)
    waiting.start()

    def queued() -> bool:
        text = httpx.get(f"{server.url}/metrics").text
        return 'etrt_queue_depth{model="held",method="forward"} 1' in text

    deadline = time.monotonic() + 2.5
    while not queued() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert queued(), "the request never waited in the batching queue"
    with pytest.raises(InferenceServerException) as caught:
        httpclient.InferenceServerClient(
            server.url.removeprefix("http://")
        ).unregister_system_shared_memory(name)
    assert caught.value.status() == "409" and name in caught.value.message()
    assert "in use by 1 request" in caught.value.message()
    waiting.join(30)
    assert not isinstance(answers[0], Exception), answers[0]
    np.testing.assert_allclose(
        answers[0].as_numpy("output_0"), eager(dynamic_batch_program, x), rtol=1e-6
    )
    http.unregister_system_shared_memory(name)  # answered: released
