"""Concurrency by construction (docs/tensorrt-rules.md): what is per method instance, and where
models load.

Upstream measured one ExecuTorch Module shared by two threads failing 20 of 20 times, and two
threads loading at once crashing ExecuTorch's Python loads 1 in 6 (and a TensorRT engine created
while another thread records a CUDA graph invalidates the recording). So here: each method
instance owns its Method and its planned memory and is executed by one thread at a time, and
every load of the engine process happens on its one load thread, one after another. Real
server core (the app with its storage, native host and ingest), real exported programs.
"""

import threading
import time

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from service.config import Settings
from service.front.app import create_app
from support import programs
from support.program_fixtures import linear_relu_program  # noqa: F401
from support.server import tensor


@pytest.fixture(scope="module")
def heavy(programs_dir):
    """Milliseconds of single-threaded kernel work per execute, so that requests overlap."""
    return programs.export_cpu_heavy(programs_dir, rounds=200, size=16384)


def _upload(client, name, program):
    with open(program.pte, "rb") as pte:
        return client.post(
            "/models",
            data={"name": name, "replace": "true"},
            files={"program": ("model.pte", pte.read())},
        )


def test_every_load_runs_on_the_one_load_thread_one_at_a_time(
    tmp_path, monkeypatch, linear_relu_program
):
    import service.dataplane.deployment as deployment

    loads, running, most = [], 0, 0
    lock = threading.Lock()
    real = deployment.ModelPool

    def recorded(*args, **kwargs):
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            loads.append(threading.current_thread().name)
        try:
            time.sleep(0.05)  # a load long enough for others to arrive meanwhile
            return real(*args, **kwargs)
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(deployment, "ModelPool", recorded)
    settings = Settings(artifacts=tmp_path / "artifacts", grpc_port=0, max_concurrent_ingests=4)
    app = create_app(settings)
    with TestClient(app) as client:
        threads = [
            threading.Thread(target=_upload, args=(client, f"m{i}", linear_relu_program))
            for i in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(m["name"] for m in client.get("/models").json()) == [
            f"m{i}" for i in range(4)
        ]
    # A restart loads every stored model again: on that same kind of thread, one at a time.
    with TestClient(create_app(settings)) as client:
        assert all(m["state"] == "ready" for m in client.get("/models").json())
    assert len(loads) == 8
    assert most == 1
    assert {name.split("_")[0] for name in loads} == {"load"}
    assert len(set(loads[:4])) == 1 and len(set(loads[4:])) == 1


def test_each_method_instance_owns_its_method_and_planned_memory(tmp_path, linear_relu_program):
    app = create_app(Settings(artifacts=tmp_path / "artifacts", grpc_port=0, instances_per_model=3))
    with TestClient(app) as client:
        assert _upload(client, "m", linear_relu_program).status_code == 201
        pool = app.state.service._catalog["m"].served[1].pool
        instances = list(pool._methods["forward"].instances)
        assert len(instances) == 3 and len({id(i) for i in instances}) == 3
        spans = sorted(
            (address, address + buffer["size"])
            for instance in instances
            for address, buffer in zip(
                instance.arena_addresses(), instance.meta["planned_buffers"], strict=True
            )
        )
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
        # Each on its own thread at once, each input its own: every answer is its own input's.
        module = linear_relu_program.module
        errors = []

        def run(instance, seed):
            rng = np.random.default_rng(seed)
            for _ in range(200):
                x = rng.standard_normal(linear_relu_program.example_inputs[0].shape, np.float32)
                [got] = instance.execute([x])
                want = module(torch.from_numpy(x)).detach().numpy()
                if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
                    errors.append(seed)

        threads = [threading.Thread(target=run, args=(i, n)) for n, i in enumerate(instances)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []


def test_the_pool_never_hands_one_instance_to_two_threads(tmp_path, monkeypatch, heavy):
    requests = 12
    from service.dataplane import model_pool

    busy, overlaps, threads_seen = set(), [], set()
    lock = threading.Lock()
    real = model_pool._MethodSlots.execute

    def watched(self, index, inputs, outputs=None, give_back=True):
        instance = self.instances[index]  # claimed from the method's gate for this run
        with lock:
            if id(instance) in busy:
                overlaps.append(id(instance))
            busy.add(id(instance))
            threads_seen.add(threading.current_thread().name)
        try:  # given back below, once no longer counted busy, so no false overlap
            return real(self, index, inputs, outputs, False)
        finally:
            with lock:
                busy.discard(id(instance))
            if give_back:
                self.gate.release(index)

    monkeypatch.setattr(model_pool._MethodSlots, "execute", watched)
    app = create_app(Settings(artifacts=tmp_path / "artifacts", grpc_port=0, instances_per_model=2))
    with TestClient(app) as client:
        assert _upload(client, "heavy", heavy).status_code == 201
        body = {"model": "heavy", "inputs": [tensor(x) for x in heavy.example_inputs]}
        answers = []

        def infer():
            answers.append(client.post("/infer", json=body).status_code)

        callers = [threading.Thread(target=infer) for _ in range(requests)]
        for t in callers:
            t.start()
        for t in callers:
            t.join()
    assert answers == [200] * requests
    assert overlaps == []
    assert len(threads_seen) >= 2  # the requests did run on several threads at once
