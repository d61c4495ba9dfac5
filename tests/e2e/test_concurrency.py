"""Requests run off the event loop: a busy model does not block others, delete waits for running."""

import threading
import time

import numpy as np
import pytest
import torch

from support import programs
from support.program_fixtures import linear_relu_program  # noqa: F401
from support.prometheus import parse, value
from support.server import registry_rows, stored_files, tensor, upload

ROUNDS, SIZE = 300, 40_000  # roughly 0.1-0.2 s of kernel work per execute here


@pytest.fixture(scope="module")
def heavy_program(programs_dir):
    return programs.export_cpu_heavy(programs_dir, rounds=ROUNDS, size=SIZE)


def run_in_threads(count, call):
    results = [None] * count
    finished = [None] * count

    def worker(index):
        results[index] = call()
        finished[index] = time.monotonic()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    return threads, results, finished


def test_busy_model_does_not_block_another(start_server, heavy_program, linear_relu_program):
    server = start_server("--instances", "1")
    x = torch.randn(SIZE)
    with server.client() as client:
        assert upload(client, "heavy", heavy_program.pte).status_code == 201
        assert upload(client, "light", linear_relu_program.pte).status_code == 201
    body = {"model": "heavy", "inputs": [tensor(x)]}

    def heavy():
        with server.client() as client:
            return client.post("/infer", json=body)

    threads, results, finished = run_in_threads(4, heavy)
    time.sleep(0.15)
    with server.client() as client:
        response = client.post(
            "/infer", json={"model": "light", "inputs": [tensor(torch.randn(2, 4))]}
        )
        light_done = time.monotonic()
    for thread in threads:
        thread.join()
    assert response.status_code == 200
    assert all(r.status_code == 200 for r in results)
    assert light_done < max(finished), "the light model waited for every heavy request"


def test_delete_waits_for_running_predictions(start_server, heavy_program):
    server = start_server("--instances", "2")
    x = torch.randn(SIZE)
    expected = heavy_program.module(x).numpy()
    body = {"model": "heavy", "inputs": [tensor(x)]}
    with server.client() as client:
        assert upload(client, "heavy", heavy_program.pte).status_code == 201
        # Bodies this large are parsed in worker processes, started by the first one: started
        # here, so that the requests below are running when the delete comes.
        assert client.post("/infer", json=body).status_code == 200

    def heavy():
        with server.client() as client:
            return client.post("/infer", json=body)

    threads, results, _ = run_in_threads(6, heavy)
    with server.client() as client:
        # The delete comes once predictions are running (their bodies take a while to parse).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            running = value(
                parse(client.get("/metrics").text), "etrt_inflight_requests", model="heavy"
            )
            if running:
                break
            time.sleep(0.02)
        deleted = client.delete("/models/heavy")
    for thread in threads:
        thread.join()
    assert deleted.status_code == 204
    codes = [r.status_code for r in results]
    assert set(codes) <= {200, 404} and 200 in codes, codes
    for response in results:
        if response.status_code == 200:
            got = np.array(response.json()["outputs"][0]["data"], dtype=np.float32)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        else:
            assert "heavy" in response.json()["error"]
    assert stored_files(server.artifacts) == ["registry.sqlite3"]
    assert registry_rows(server.artifacts) == []
    with server.client() as client:
        assert client.post("/infer", json=body).status_code == 404
