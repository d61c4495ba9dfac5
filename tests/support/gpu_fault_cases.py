"""The poisoned-context scenario (issue 31, item 1) against a running server, shared by the CPU
e2e test (the host-memory stand-in poisoned) and the H200 test (a real kernel writing through a
bad address): one model faults while another serves, and everything the containment promises is
checked and timed.

`server` serves `good` and `bad`, programs of the same signature (`inputs`); every execute of
`bad` poisons the device context. With quarantine after `k` faults, `contain()` makes `bad` fault
k times and returns what it measured.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import grpc
import httpx
import numpy as np

from service.front.protocols.v2_grpc import messages
from support.prometheus import parse, value
from support.server import tensor


@dataclass
class Measured:
    ready_false_s: list[float] = field(default_factory=list)  # fault answer -> ready 503
    serving_again_s: list[float] = field(default_factory=list)  # fault answer -> good's 200
    good_statuses: dict[int, int] = field(default_factory=dict)  # status -> count


def _body(inputs) -> dict:
    return {"inputs": [tensor(x, f"input_{i}") for i, x in enumerate(inputs)]}


class _Traffic:
    """Requests to the good model, one after another, for as long as the scenario runs."""

    def __init__(self, url: str, inputs, expected):
        self._url, self._body, self._expected = url, _body(inputs), expected
        self.statuses: list[tuple[float, int]] = []
        self.wrong: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), "a request to the good model hangs"

    def _run(self):
        with httpx.Client(base_url=self._url, timeout=30) as client:
            while not self._stop.is_set():
                response = client.post("/v2/models/good/infer", json=self._body)
                self.statuses.append((time.monotonic(), response.status_code))
                if response.status_code == 200:
                    data = response.json()["outputs"][0]["data"]
                    if not np.allclose(data, self._expected, rtol=1e-5, atol=1e-5):
                        self.wrong.append(str(data)[:200])
                time.sleep(0.01)

    def first_ok_after(self, t: float, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, status in list(self.statuses):
                if at > t and status == 200:
                    return at - t
            time.sleep(0.02)
        raise AssertionError(f"the good model did not answer again within {timeout} s")


def _fault(client: httpx.Client, inputs, measured: Measured) -> float:
    """One request to `bad`: its 503 and the server's readiness right after. Returns when the
    answer came."""
    response = client.post("/v2/models/bad/infer", json=_body(inputs))
    at = time.monotonic()
    assert response.status_code == 503, response.text
    assert int(response.headers["Retry-After"]) >= 1, response.headers
    error = response.json()["error"]
    assert "model 'bad'" in error and "poisoned the GPU context" in error, error
    assert "input_0" in error, error  # the input that triggered it is named
    while True:  # readiness goes false at once: it is checked within 1 s
        ready = client.get("/v2/health/ready")
        if ready.status_code == 503:
            measured.ready_false_s.append(time.monotonic() - at)
            assert "GPU" in ready.json()["error"] or "restarting" in ready.json()["error"]
            break
        assert time.monotonic() - at < 1.0, "still ready 1 s after a GPU fault"
        time.sleep(0.02)
    return at


def contain(server, inputs, expected, k: int) -> Measured:
    measured = Measured()
    with (
        httpx.Client(base_url=server.url, timeout=30) as client,
        _Traffic(server.url, inputs, expected) as traffic,
    ):
        traffic.first_ok_after(0.0, 10.0)
        for n in range(1, k + 1):
            at = _fault(client, inputs, measured)
            if n == 1:
                assert not _grpc_ready(server.grpc_url)  # gRPC agrees (the engine drains 1 s)
            measured.serving_again_s.append(traffic.first_ok_after(at, 10.0))
            _wait_ready(client)
            metrics = parse(client.get("/metrics").text)
            assert value(metrics, "etrt_model_gpu_faults_total", model="bad") == n
            assert value(metrics, "etrt_engine_restarts_total", reason="gpu_fault") == n
        # Quarantined: not loaded by the engine started after the k-th fault; it says why.
        description = client.get("/models/bad").json()
        assert description["state"] == "unavailable", description
        assert "quarantined" in description["error"], description
        assert client.get("/v2/models/bad/ready").status_code == 503
        index = client.post("/v2/repository/index", json={}).json()
        [entry] = [e for e in index if e["name"] == "bad"]
        assert "quarantined" in entry["reason"], entry
        assert client.get("/v2/models/good/ready").status_code == 200
        # A load lifts it: it serves again (until its next execute).
        loaded = client.post("/v2/repository/models/bad/load", json={})
        assert loaded.status_code == 200, loaded.text
        assert client.get("/v2/models/bad/ready").status_code == 200
    measured.good_statuses = dict(
        (s, sum(1 for _, x in traffic.statuses if x == s)) for _, s in traffic.statuses
    )
    assert set(measured.good_statuses) <= {200, 503}, measured.good_statuses
    assert not traffic.wrong, traffic.wrong
    log = server.log_path.read_text(errors="replace")
    assert "front 0 exited" not in log, "a front was restarted"
    [logged, *_] = [line for line in log.splitlines() if "GPU fault: " in line]
    assert "model 'bad'" in logged and "input_0" in logged, logged  # the model and its input
    return measured


def _grpc_ready(url: str) -> bool:
    """gRPC ServerReady through grpcio and the server's own messages (the GPU host has no
    tritonclient)."""
    with grpc.insecure_channel(url) as channel:
        ready = channel.unary_unary(
            "/inference.GRPCInferenceService/ServerReady",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=messages.message("ServerReadyResponse").FromString,
        )
        return ready(messages.message("ServerReadyRequest")(), timeout=5).ready


def _wait_ready(client: httpx.Client, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while client.get("/v2/health/ready").status_code != 200:
        assert time.monotonic() < deadline, "not ready again"
        time.sleep(0.05)
