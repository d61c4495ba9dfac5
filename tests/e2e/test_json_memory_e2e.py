"""Issue 34, item 2, against a real server: a 60 MB JSON tensor body costs at most three times
its size above baseline in every process of the server (the front that receives it, the worker
that decodes it, the engine that runs it), over the Open Inference Protocol and the native
/infer alike. Measured as the kernel's high-water mark of resident memory (VmHWM), reset before
the request through /proc/<pid>/clear_refs.
"""

import json
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

from support.processes import memory_status
from support.programs import export_module

MiB = 1 << 20
ELEMENTS = 2_900_000  # random FP32 values as Python writes them (~20 bytes each): 60 MB


class _Mean(torch.nn.Module):
    def forward(self, x):
        return x.mean(0, keepdim=True)


def _descendants(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            found += [int(child), *_descendants(int(child))]
    return found


def _name(pid: int) -> str:
    arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    for known in (b"service.front", b"service.engine"):
        if known in arguments:
            return known.decode()
    return "offload worker" if b"multiprocessing" in b" ".join(arguments) else "other"


@pytest.fixture(scope="module")
def served(start_server_once, programs_dir):
    program = export_module(programs_dir, f"mean_{ELEMENTS}", _Mean(), (torch.zeros(ELEMENTS),))
    server = start_server_once()
    with httpx.Client(base_url=server.url, timeout=300) as client:
        with program.pte.open("rb") as pte:
            files = {"program": ("model.pte", pte.read(), "application/octet-stream")}
        assert client.post("/models", data={"name": "mean"}, files=files).status_code == 201
    return server


@pytest.fixture(scope="module")
def start_server_once(tmp_path_factory):
    from support.server import ServerProcess

    started = []

    def start():
        server = ServerProcess(tmp_path_factory.mktemp("json") / "artifacts").start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def _bodies(tmp_path) -> dict[str, tuple[str, Path]]:
    values = np.random.default_rng(0).standard_normal(ELEMENTS).astype(np.float32).tolist()
    tensor = {"name": "input_0", "shape": [ELEMENTS], "datatype": "FP32", "data": values}
    v2 = tmp_path / "v2.json"
    v2.write_bytes(json.dumps({"inputs": [tensor]}).encode())
    native = tmp_path / "native.json"
    native.write_bytes(json.dumps({"model": "mean", "inputs": [tensor]}).encode())
    return {"v2": ("/v2/models/mean/infer", v2), "native": ("/infer", native)}


@pytest.mark.parametrize("protocol", ["v2", "native"])
def test_a_60_mb_json_body_peaks_under_3x_its_size_in_every_process(served, tmp_path, protocol):
    path, body = _bodies(tmp_path)[protocol]
    size = body.stat().st_size
    assert 55e6 < size < 64 * MiB
    content = body.read_bytes()
    with httpx.Client(base_url=served.url, timeout=300) as client:
        # Warm up: the decoding workers start on the first large body.
        assert client.post(path, content=content).status_code == 200
        pids = _descendants(served.process.pid)
        baseline = {pid: memory_status(pid)["VmRSS"] for pid in pids}
        for pid in pids:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        response = client.post(path, content=content)
        peak = {pid: memory_status(pid)["VmHWM"] for pid in pids}
    assert response.status_code == 200, response.text[:500]
    grown = {f"{_name(pid)} {pid}": (peak[pid] - baseline[pid]) / size for pid in pids}
    assert any(name.startswith("offload worker") for name in grown), grown
    assert all(ratio <= 3 for ratio in grown.values()), grown
