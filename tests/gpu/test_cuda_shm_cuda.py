"""CUDA shared memory on the H200, end to end: a real server (front + engine processes) with
--allow-client-shm, regions exported by this test process the way tritonclient's
cuda_shared_memory does it (cudaMalloc + cudaIpcGetMemHandle through cuda-python; the engine,
another process, opens the handle), registered over REST and gRPC, inputs read from and
outputs written to device memory, and what the engine did counted on /metrics.

Two programs. The image program (x * 2 + 1, exported on the CPU machine into
$ETRT_TEST_PROGRAMS_DIR) runs on ExecuTorch's portable kernels and plans its input in host
memory: the native host copies each CUDA input into it device-to-host (to_host) and each CUDA
output is copied back (from_host). The TensorRT add program with unplanned inputs
($ETHOST_TRT_PROGRAMS, served with the test engine provider on CUDA memory) takes the region's
device address itself: aligned, the delegate binds it (etrt_shm_bound_total, 0 staging copies,
0 copies); 16 bytes off, the delegate stages it (etrt_tensorrt_staging_copies_total). Its
output, planned in host memory, is copied into the region by the host (from_host). The same
program with its output unplanned too (UNPLANNED_OUTPUTS_SET) has the delegate write the output
into the region itself: bound when aligned, staged 16 bytes off, no copy by the engine.
"""

from __future__ import annotations

import base64
import os

import grpc
import httpx
import numpy as np
import pytest

from service.front.protocols.v2_grpc import messages
from support.cuda_regions import DeviceRegion, register
from support.program_fixtures import image_program  # noqa: F401
from support.server import ServerProcess, upload

pytestmark = pytest.mark.gpu
IMAGE = (1, 3, 224, 224)
IMAGE_BYTES = int(np.prod(IMAGE)) * 4


@pytest.fixture(scope="module")
def server(tmp_path_factory, image_program):
    server = ServerProcess(
        tmp_path_factory.mktemp("cudashm") / "artifacts", "--allow-client-shm", "--workers", "1"
    ).start()
    with server.client() as client:
        response = upload(client, "img", image_program.pte, image_program.ptds)
        assert response.status_code == 201, response.text
    yield server
    server.stop()


@pytest.fixture
def region():
    made = DeviceRegion(2 * IMAGE_BYTES + 4096)
    yield made
    made.free()


def unregister(server, name):
    response = httpx.post(f"{server.url}/v2/cudasharedmemory/region/{name}/unregister")
    assert response.status_code == 200, response.text


def infer(server, name, in_offset, out_offset):
    body = {
        "inputs": [
            {
                "name": "input_0",
                "datatype": "FP32",
                "shape": list(IMAGE),
                "parameters": {
                    "shared_memory_region": name,
                    "shared_memory_byte_size": IMAGE_BYTES,
                    "shared_memory_offset": in_offset,
                },
            }
        ],
        "outputs": [
            {
                "name": "output_0",
                "parameters": {
                    "shared_memory_region": name,
                    "shared_memory_byte_size": IMAGE_BYTES,
                    "shared_memory_offset": out_offset,
                },
            }
        ],
    }
    return httpx.post(f"{server.url}/v2/models/img/infer", json=body, timeout=60)


def copies(server) -> dict[str, float]:
    """etrt_shm_copies_total{kind="cuda"} by reason, plus "bound" (etrt_shm_bound_total)."""
    found = {}
    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        if line.startswith('etrt_shm_copies_total{kind="cuda"'):
            reason = line.split('reason="', 1)[1].split('"', 1)[0]
            found[reason] = float(line.split()[-1])
        elif line.startswith('etrt_shm_bound_total{kind="cuda"}'):
            found["bound"] = float(line.split()[-1])
    return found


def staging(server, model) -> dict[str, float]:
    """etrt_tensorrt_staging_copies_total of `model`, by binding."""
    found = {}
    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        if line.startswith("etrt_tensorrt_staging_copies_total{") and f'model="{model}"' in line:
            binding = line.split('binding="', 1)[1].split('"', 1)[0]
            found[binding] = found.get(binding, 0) + float(line.split()[-1])
    return found


@pytest.mark.parametrize("in_offset", [0, 16], ids=["aligned", "misaligned16"])
def test_inputs_and_outputs_through_cuda_shm(server, region, image_program, in_offset):
    x = np.random.default_rng(in_offset).standard_normal(IMAGE, dtype=np.float32)
    region.write(x, in_offset)
    name = f"cuda_{in_offset}"
    response = register(server, name, region)
    assert response.status_code == 200, response.text
    status = httpx.get(f"{server.url}/v2/cudasharedmemory/region/{name}/status").json()
    assert status == [{"name": name, "device_id": 0, "byte_size": region.nbytes}]
    before = copies(server)
    out_offset = IMAGE_BYTES + 256
    response = infer(server, name, in_offset, out_offset)
    assert response.status_code == 200, response.text
    [output] = response.json()["outputs"]
    assert "data" not in output and output["parameters"]["shared_memory_region"] == name
    expected = x * 2 + 1
    np.testing.assert_allclose(region.read(IMAGE, out_offset), expected, rtol=1e-6)
    after = copies(server)
    # the image program plans its input in host memory: one device-to-host copy by the host
    assert after.get("to_host", 0) == before.get("to_host", 0) + 1
    assert after.get("from_host", 0) == before.get("from_host", 0) + 1
    assert after.get("bound", 0) == before.get("bound", 0)
    unregister(server, name)
    assert httpx.get(f"{server.url}/v2/cudasharedmemory/status").json() == []


def test_grpc_registers_and_lists_cuda_regions(server, region):
    with grpc.insecure_channel(server.grpc_url) as channel:

        def call(rpc, **fields):
            request = messages.message(f"{rpc}Request")(**fields)
            method = channel.unary_unary(
                f"/inference.GRPCInferenceService/{rpc}",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=messages.message(f"{rpc}Response").FromString,
            )
            return method(request)

        call(
            "CudaSharedMemoryRegister",
            name="g",
            raw_handle=region.raw_handle,
            device_id=0,
            byte_size=IMAGE_BYTES,
        )
        listed = call("CudaSharedMemoryStatus", name="")
        assert listed.regions["g"].byte_size == IMAGE_BYTES and listed.regions["g"].device_id == 0
        call("CudaSharedMemoryUnregister", name="g")
        assert not call("CudaSharedMemoryStatus", name="").regions


def test_grpc_model_infer_through_cuda_shm_on_both_front_paths(server, region):
    """ModelInfer with its input and output in a CUDA region, without a deadline (the front's
    native path sends the references: runtime_ext/front/grpc_infer.h) and with one (the
    servicer's path): the same answer message and the same output written into the region."""
    x = np.random.default_rng(3).standard_normal(IMAGE, dtype=np.float32)
    region.write(x, 0)
    assert register(server, "grpc_cuda", region).status_code == 200
    request = messages.ModelInferRequest(model_name="img")
    tensor = request.inputs.add(name="input_0", datatype="FP32", shape=list(IMAGE))
    tensor.parameters["shared_memory_region"].string_param = "grpc_cuda"
    tensor.parameters["shared_memory_byte_size"].int64_param = IMAGE_BYTES
    output = request.outputs.add(name="output_0")
    output.parameters["shared_memory_region"].string_param = "grpc_cuda"
    output.parameters["shared_memory_byte_size"].int64_param = IMAGE_BYTES
    output.parameters["shared_memory_offset"].int64_param = IMAGE_BYTES + 256
    answers = []
    with grpc.insecure_channel(server.grpc_url) as channel:
        infer_call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        for deadline in (None, None, 60.0):  # the first teaches the front the model table
            region.write(np.zeros(IMAGE, np.float32), IMAGE_BYTES + 256)
            answer = infer_call(request.SerializeToString(), timeout=deadline)
            answers.append(messages.ModelInferResponse.FromString(answer))
            np.testing.assert_allclose(region.read(IMAGE, IMAGE_BYTES + 256), x * 2 + 1, rtol=1e-6)
    assert answers[1] == answers[2] and not answers[1].raw_output_contents
    unregister(server, "grpc_cuda")


def test_hostile_cuda_regions_are_refused_naming_them(server, region):
    too_big = register(server, "huge", region, byte_size=region.nbytes + (1 << 20))
    assert too_big.status_code == 400 and "'huge'" in too_big.json()["error"]
    assert "larger than the CUDA allocation" in too_big.json()["error"]
    body = {"raw_handle": {"b64": base64.b64encode(b"\x01" * 64).decode()}, "byte_size": 64}
    garbage = httpx.post(f"{server.url}/v2/cudasharedmemory/region/junk/register", json=body)
    assert garbage.status_code == 400 and "'junk'" in garbage.json()["error"], garbage.text
    body["device_id"] = 99
    far = httpx.post(f"{server.url}/v2/cudasharedmemory/region/far/register", json=body)
    assert far.status_code == 400 and "device_id 99" in far.json()["error"]
    assert register(server, "fits", region).status_code == 200
    past = infer(server, "fits", region.nbytes - 100, 0)
    assert past.status_code == 400 and "past the end of region 'fits'" in past.json()["error"]
    unregister(server, "fits")
    assert httpx.get(f"{server.url}/v2/health/live").status_code == 200


def test_metrics_report_gpu_memory(server):
    """Triton's names and labels (service/gpu_gauges.py), read the way model-analyzer's remote
    monitor reads them: prometheus_client's parser, samples keyed by gpu_uuid."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{server.url}/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    [total] = families["nv_gpu_memory_total_bytes"].samples
    [used] = families["nv_gpu_memory_used_bytes"].samples
    assert total.labels["gpu_uuid"].startswith("GPU-") and total.value > 100e9
    assert used.labels == total.labels and 0 < used.value < total.value
    assert "nv_gpu_utilization" in families and "nv_gpu_power_usage" in families


# --- the TensorRT delegate reading the region itself ----------------------------------------

TRT_BACKEND = "support.test_backend_setup:install_test_backend_on_cuda"
ADD = (3, 5)
ADD_BYTES = 3 * 5 * 4


@pytest.fixture(scope="module")
def add_program(programs_dir):
    from support.trt_models import UNPLANNED_INPUTS_SET, TrtProgram

    where = os.environ.get("ETHOST_TRT_PROGRAMS")
    if where:
        found = TrtProgram.at(where, *UNPLANNED_INPUTS_SET[0], planned_inputs=False)
        assert found.exists(), f"ETHOST_TRT_PROGRAMS lacks {found.pte}"
        return found
    from support.trt_programs import export_trt_program

    return export_trt_program(programs_dir, *UNPLANNED_INPUTS_SET[0], planned_inputs=False)


@pytest.fixture(scope="module")
def add_out_program(programs_dir):
    from support.trt_models import UNPLANNED_OUTPUTS_SET, TrtProgram

    unplanned = {"planned_inputs": False, "planned_outputs": False}
    where = os.environ.get("ETHOST_TRT_PROGRAMS")
    if where:
        found = TrtProgram.at(where, *UNPLANNED_OUTPUTS_SET[0], **unplanned)
        assert found.exists(), f"ETHOST_TRT_PROGRAMS lacks {found.pte}"
        return found
    from support.trt_programs import export_trt_program

    return export_trt_program(programs_dir, *UNPLANNED_OUTPUTS_SET[0], **unplanned)


@pytest.fixture(scope="module")
def trt_server(tmp_path_factory, add_program, add_out_program):
    server = ServerProcess(
        tmp_path_factory.mktemp("cudashm_trt") / "artifacts",
        "--allow-client-shm",
        "--workers",
        "1",
        "--backend-setup",
        TRT_BACKEND,
    ).start()
    with server.client() as client:
        response = upload(client, "add", add_program.pte)
        assert response.status_code == 201, response.text
        response = upload(client, "addout", add_out_program.pte)
        assert response.status_code == 201, response.text
        metadata = client.get("/v2/models/add").json()
    server.add_inputs = [i["name"] for i in metadata["inputs"]]
    server.add_output = metadata["outputs"][0]["name"]
    yield server
    server.stop()


def infer_add(server, name, offsets, out_offset=None, model="add"):
    def ref(offset):
        return {
            "shared_memory_region": name,
            "shared_memory_byte_size": ADD_BYTES,
            "shared_memory_offset": offset,
        }

    body = {
        "inputs": [
            {"name": n, "datatype": "FP32", "shape": list(ADD), "parameters": ref(offset)}
            for n, offset in zip(server.add_inputs, offsets, strict=True)
        ]
    }
    if out_offset is not None:
        body["outputs"] = [{"name": server.add_output, "parameters": ref(out_offset)}]
    return httpx.post(f"{server.url}/v2/models/{model}/infer", json=body, timeout=60)


@pytest.mark.parametrize("misalign", [0, 16], ids=["aligned", "misaligned16"])
def test_tensorrt_delegate_reads_the_cuda_region_itself(trt_server, region, misalign):
    rng = np.random.default_rng(misalign)
    x, y = (rng.standard_normal(ADD, dtype=np.float32) for _ in range(2))
    offsets = (misalign, 1024 + misalign)
    region.write(x, offsets[0])
    region.write(y, offsets[1])
    name = f"trt_{misalign}"
    assert register(trt_server, name, region).status_code == 200
    before, staged_before = copies(trt_server), staging(trt_server, "add")
    response = infer_add(trt_server, name, offsets)
    assert response.status_code == 200, response.text
    [output] = response.json()["outputs"]
    np.testing.assert_allclose(np.array(output["data"]).reshape(ADD), x + y, rtol=1e-6)
    after, staged = copies(trt_server), staging(trt_server, "add")
    # both inputs handed over at their device addresses: no copy by the engine or the host
    assert after.get("bound", 0) == before.get("bound", 0) + 2
    for reason in ("to_host", "device_to_device"):
        assert after.get(reason, 0) == before.get(reason, 0), reason
    # the delegate's bindings are input0, input1 (the region) and output0 (host-planned)
    added = {b: staged.get(b, 0) - staged_before.get(b, 0) for b in ("input0", "input1")}
    assert added == ({"input0": 1, "input1": 1} if misalign else {"input0": 0, "input1": 0})
    unregister(trt_server, name)


def test_tensorrt_outputs_into_cuda_shm_match(trt_server, region):
    rng = np.random.default_rng(7)
    x, y = (rng.standard_normal(ADD, dtype=np.float32) for _ in range(2))
    region.write(x, 0)
    region.write(y, 1024)
    assert register(trt_server, "trt_out", region).status_code == 200
    before = copies(trt_server)
    response = infer_add(trt_server, "trt_out", (0, 1024), out_offset=2048)
    assert response.status_code == 200, response.text
    [output] = response.json()["outputs"]
    assert "data" not in output and output["parameters"]["shared_memory_region"] == "trt_out"
    np.testing.assert_allclose(region.read(ADD, 2048), x + y, rtol=1e-6)
    assert copies(trt_server).get("from_host", 0) == before.get("from_host", 0) + 1
    unregister(trt_server, "trt_out")


@pytest.mark.parametrize("misalign", [0, 16], ids=["aligned", "misaligned16"])
def test_tensorrt_delegate_writes_an_unplanned_output_into_the_cuda_region(
    trt_server, region, misalign
):
    rng = np.random.default_rng(11 + misalign)
    x, y = (rng.standard_normal(ADD, dtype=np.float32) for _ in range(2))
    region.write(x, 0)
    region.write(y, 1024)
    name = f"trt_out_{misalign}"
    assert register(trt_server, name, region).status_code == 200
    before, staged_before = copies(trt_server), staging(trt_server, "addout")
    out_offset = 2048 + misalign
    response = infer_add(trt_server, name, (0, 1024), out_offset=out_offset, model="addout")
    assert response.status_code == 200, response.text
    [output] = response.json()["outputs"]
    assert "data" not in output and output["shape"] == list(ADD)
    np.testing.assert_allclose(region.read(ADD, out_offset), x + y, rtol=1e-6)
    after, staged = copies(trt_server), staging(trt_server, "addout")
    # two inputs and the output handed over at their device addresses; nothing copied
    assert after.get("bound", 0) == before.get("bound", 0) + 3
    for reason in ("to_host", "device_to_device", "from_host"):
        assert after.get(reason, 0) == before.get(reason, 0), reason
    added = {b: staged.get(b, 0) - staged_before.get(b, 0) for b in ("input0", "input1", "output0")}
    assert added == {"input0": 0, "input1": 0, "output0": 1 if misalign else 0}
    unregister(trt_server, name)
