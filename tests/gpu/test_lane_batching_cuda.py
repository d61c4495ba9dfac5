"""Dynamic batching in the engine's native lane over CUDA shared memory, on the H200: requests
whose input rows lie in a client's CUDA region are gathered on the device into one batch
(runtime_ext/lane/batcher.h), run once, and each request's rows land in its own window of the
region; over the fronts' native path (v2 JSON naming the regions)."""

from __future__ import annotations

import json
import threading

import httpx
import numpy as np
import pytest
import torch

from support.cuda_regions import DeviceRegion, register
from support.program_fixtures import dynamic_batch_program  # noqa: F401
from support.prometheus import parse, value
from support.server import ServerProcess, tensor, upload

pytestmark = pytest.mark.gpu
WIDTH = 4
ROW_BYTES = WIDTH * 4
CLIENTS = 12


def infer(server, index: int) -> httpx.Response:
    """One row, its input at 256 * index in the region and its output 4 KiB further."""
    refs = {
        "shared_memory_region": "rows",
        "shared_memory_byte_size": ROW_BYTES,
    }
    body = {
        "inputs": [
            {
                "name": "input_0",
                "datatype": "FP32",
                "shape": [1, WIDTH],
                "parameters": {**refs, "shared_memory_offset": 256 * index},
            }
        ],
        "outputs": [
            {"name": "output_0", "parameters": {**refs, "shared_memory_offset": 4096 + 256 * index}}
        ],
    }
    return httpx.post(f"{server.url}/v2/models/b/infer", json=body, timeout=60)


def test_rows_in_a_cuda_region_are_merged_on_the_device(tmp_path, dynamic_batch_program):
    config = {
        "max_batch_size": 16,
        "dynamic_batching": {"max_queue_delay_microseconds": 100_000},
        "instance_group": [{"count": 1}],
    }
    server = ServerProcess(tmp_path / "artifacts", "--allow-client-shm", "--workers", "1").start()
    region = DeviceRegion(8192)
    try:
        with server.client() as client:
            created = upload(
                client, "b", dynamic_batch_program.pte, fields={"config": json.dumps(config)}
            )
            assert created.status_code == 201, created.text
            # The first execute runs in Python, which measures it; the lane merges after it.
            first = {"model": "b", "inputs": [tensor(np.ones((1, WIDTH), np.float32))]}
            assert client.post("/infer", json=first).status_code == 200
        assert register(server, "rows", region).status_code == 200
        rows = np.random.default_rng(3).standard_normal((CLIENTS, WIDTH)).astype(np.float32)
        for index, row in enumerate(rows):
            region.write(row, 256 * index)
        answers = [None] * CLIENTS
        threads = [
            threading.Thread(target=lambda i=i: answers.__setitem__(i, infer(server, i)))
            for i in range(CLIENTS)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for index, answer in enumerate(answers):
            assert answer.status_code == 200, answer.text
            expected = dynamic_batch_program.module(torch.from_numpy(rows[index : index + 1]))
            expected = expected.detach().numpy()
            np.testing.assert_allclose(
                region.read(expected.shape, 4096 + 256 * index),
                expected,
                rtol=1e-5,
                atol=1e-6,
            )
        parsed = parse(httpx.get(f"{server.url}/metrics").text)
        labels = {"model": "b", "method": "forward"}
        assert value(parsed, "etrt_engine_lane_requests_total", **labels) == CLIENTS
        assert value(parsed, "etrt_batch_size_count", **labels) < 1 + CLIENTS, "nothing merged"
        assert value(parsed, "etrt_batch_size_sum", **labels) == 1 + CLIENTS
    finally:
        httpx.post(f"{server.url}/v2/cudasharedmemory/region/rows/unregister")
        server.stop()
        region.free()
