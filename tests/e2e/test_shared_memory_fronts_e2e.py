"""System shared memory through 2 front processes with bearer tokens set: a region registered
through one connection serves requests arriving at either front (the engine holds the
regions), registering needs the inference token, and an unregistered region leaves the engine's
address space."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException

from support.processes import role_pids
from support.program_fixtures import image_program  # noqa: F401
from support.server import ServerProcess, upload

IMAGE = (1, 3, 224, 224)
IMAGE_BYTES = int(np.prod(IMAGE)) * 4
ADMIN, INFER = "admin-" + uuid.uuid4().hex, "infer-" + uuid.uuid4().hex
AUTH = {"Authorization": f"Bearer {INFER}"}
GRPC_AUTH = {"authorization": f"Bearer {INFER}"}


@pytest.fixture(scope="module")
def server(tmp_path_factory, image_program):
    server = ServerProcess(
        tmp_path_factory.mktemp("shm2") / "artifacts",
        "--allow-client-shm",
        "--workers",
        "2",
        env={"ETRT_ADMIN_TOKEN": ADMIN, "ETRT_INFER_TOKEN": INFER},
    ).start()
    with server.client() as client:
        client.headers["Authorization"] = f"Bearer {ADMIN}"
        response = upload(client, "img", image_program.pte, image_program.ptds)
        assert response.status_code == 201, response.text
    yield server
    server.stop()


@pytest.fixture
def region():
    name = f"f{uuid.uuid4().hex[:8]}"
    handle = shm.create_shared_memory_region(name, f"/etrt_test_{name}", 3 * IMAGE_BYTES)
    yield name, f"/etrt_test_{name}", handle
    shm.destroy_shared_memory_region(handle)


def engine_maps(server) -> str:
    [engine] = role_pids(server, "engine")
    return Path(f"/proc/{engine}/maps").read_text()


def test_registering_needs_the_inference_token(server, region):
    name, key, _ = region
    url = f"{server.url}/v2/systemsharedmemory/region/{name}/register"
    body = {"key": key, "offset": 0, "byte_size": IMAGE_BYTES}
    assert httpx.post(url, json=body).status_code == 401
    admin = {"Authorization": f"Bearer {ADMIN}"}
    assert httpx.post(url, json=body, headers=admin).status_code == 403
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        with pytest.raises(InferenceServerException) as caught:
            grpc.register_system_shared_memory(name, key, IMAGE_BYTES)
        assert "UNAUTHENTICATED" in caught.value.status()
    assert httpx.post(url, json=body, headers=AUTH).status_code == 200
    assert (
        httpx.post(
            f"{server.url}/v2/systemsharedmemory/region/{name}/unregister", headers=AUTH
        ).status_code
        == 200
    )


def test_a_region_serves_fresh_connections_through_both_fronts(server, region, image_program):
    name, key, handle = region
    x = np.random.default_rng(7).standard_normal(IMAGE, dtype=np.float32)
    with torch.no_grad():
        expected = image_program.module(torch.from_numpy(x)).numpy()
    shm.set_shared_memory_region(handle, [x])
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        grpc.register_system_shared_memory(name, key, 3 * IMAGE_BYTES, headers=GRPC_AUTH)
    assert f"/dev/shm/etrt_test_{name}" in engine_maps(server)

    def infer(offset: int) -> None:
        client = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
        tensor = httpclient.InferInput("input_0", list(IMAGE), "FP32")
        tensor.set_shared_memory(name, IMAGE_BYTES)
        output = httpclient.InferRequestedOutput("output_0")
        output.set_shared_memory(name, IMAGE_BYTES, offset=offset)
        client.infer("img", [tensor], outputs=[output], headers=AUTH)
        client.close()

    # Fresh connections two at a time, each answer in its own part of the region: a front busy
    # with one leaves the other to the other front (one after another, the front that just
    # answered is awake first and would take them all).
    for attempt in range(12):
        offsets = (IMAGE_BYTES, 2 * IMAGE_BYTES)
        for offset in offsets:
            shm.set_shared_memory_region(handle, [np.zeros(IMAGE, np.float32)], offset=offset)
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(infer, offsets))
        for offset in offsets:
            y = shm.get_contents_as_numpy(handle, np.float32, list(IMAGE), offset=offset)
            np.testing.assert_allclose(y, expected, rtol=1e-6, err_msg=f"attempt {attempt}")
    metrics = httpx.get(f"{server.url}/metrics", headers=AUTH).text
    fronts = [
        line for line in metrics.splitlines() if line.startswith("etrt_front_requests_total{")
    ]
    assert len(fronts) == 2, fronts  # both fronts sent requests that used the region
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        grpc.unregister_system_shared_memory(name, headers=GRPC_AUTH)
    # Released: the engine no longer maps the object.
    assert f"/dev/shm/etrt_test_{name}" not in engine_maps(server)
