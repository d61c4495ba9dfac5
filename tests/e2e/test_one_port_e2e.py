"""The Knative/KServe container contract: REST and gRPC (h2c) on one port (--one-port), and
SIGTERM's drain (readiness false at once, in-flight work finished, new work refused, then exit).
Knative's $PORT is in test_healthcheck_e2e.py, with the image's probe that must follow it."""

from __future__ import annotations

import json
import re
import signal
import socket
import threading
import time

import grpc
import httpx
import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from support.processes import children
from support.program_fixtures import dynamic_batch_program, linear_relu_program  # noqa: F401
from support.server import tensor, upload

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# Seconds a lone request waits in the batching queue: a request in flight for that long.
QUEUED_S = 2.0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _health(channel: grpc.Channel) -> int:
    stub = health_pb2_grpc.HealthStub(channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status


def _grpc_infer(url: str, model: str, x: np.ndarray) -> np.ndarray:
    with grpcclient.InferenceServerClient(url) as client:
        tensor_in = grpcclient.InferInput("input_0", list(x.shape), "FP32")
        tensor_in.set_data_from_numpy(x)
        return client.infer(model, [tensor_in]).as_numpy("output_0")


def _http_infer(url: str, model: str, x: np.ndarray) -> np.ndarray:
    with httpclient.InferenceServerClient(url) as client:
        tensor_in = httpclient.InferInput("input_0", list(x.shape), "FP32")
        tensor_in.set_data_from_numpy(x, binary_data=True)
        return client.infer(model, [tensor_in]).as_numpy("output_0")


def test_rest_and_grpc_answer_on_one_port(start_server, linear_relu_program):
    server = start_server("--one-port", "--grpc-port", "0")
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
    x = linear_relu_program.example_inputs[0].numpy()
    expected = linear_relu_program.module(torch.from_numpy(x)).detach().numpy()
    one = f"127.0.0.1:{server.port}"
    np.testing.assert_allclose(_http_infer(one, "lin", x), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_grpc_infer(one, "lin", x), expected, rtol=1e-5, atol=1e-6)
    # Both on one connection pool at once, many times: no answer crosses to the other protocol.
    with grpcclient.InferenceServerClient(one) as grpc_client, server.client() as http:
        assert grpc_client.is_server_ready() and grpc_client.is_model_ready("lin")
        for _ in range(20):
            got = http.post("/infer", json={"model": "lin", "inputs": [tensor(x)]})
            assert got.status_code == 200, got.text
            tensor_in = grpcclient.InferInput("input_0", list(x.shape), "FP32")
            tensor_in.set_data_from_numpy(x)
            out = grpc_client.infer("lin", [tensor_in]).as_numpy("output_0")
            np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    with grpc.insecure_channel(one) as channel:
        assert _health(channel) == SERVING
    # --grpc-port 0: no port of gRPC's own (the one it was given by the harness is unused).
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", server.grpc_port)) != 0


def test_without_one_port_a_grpc_client_on_the_http_port_fails_at_once(
    start_server, linear_relu_program
):
    """The preface goes to the HTTP parser (and never to the native path): refused, not hung."""
    server = start_server()
    with grpcclient.InferenceServerClient(f"127.0.0.1:{server.port}") as client:
        begun = time.monotonic()
        with pytest.raises(InferenceServerException):
            client.is_server_ready(client_timeout=10)
        assert time.monotonic() - begun < 5
    with server.client() as client:
        assert client.get("/health/ready").status_code == 200


def _queued_model(server, program, queued_s: float = QUEUED_S) -> None:
    """Model "slow": a lone request waits `queued_s` in its batching queue."""
    config = {
        "max_batch_size": 8,
        "dynamic_batching": {"max_queue_delay_microseconds": int(queued_s * 1e6)},
    }
    with server.client() as client:
        response = upload(client, "slow", program.pte, fields={"config": json.dumps(config)})
        assert response.status_code == 201, response.text


def _in_background(call) -> tuple[threading.Thread, dict]:
    result: dict = {}

    def run():
        try:
            result["value"] = call()
        except Exception as exc:  # the test reads it
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def test_sigterm_drains_then_stops(start_server, dynamic_batch_program):
    server = start_server("--one-port")
    _queued_model(server, dynamic_batch_program)
    x = np.ones((1, 4), np.float32)
    one = f"127.0.0.1:{server.port}"
    body = {"model": "slow", "inputs": [tensor(x)]}
    with server.client() as client:
        expected = client.post("/infer", json=body).json()  # after QUEUED_S
    rest, rest_result = _in_background(
        lambda: httpx.post(f"{server.url}/infer", json=body, timeout=30)
    )
    rpc, rpc_result = _in_background(lambda: _grpc_infer(one, "slow", x))
    channel = grpc.insecure_channel(one)  # opened before: the probe's own connection
    assert _health(channel) == SERVING
    processes = children(server.process.pid)
    time.sleep(0.5)  # both requests are queued in the engine now
    assert rest.is_alive() and rpc.is_alive()

    signalled = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    # Both probes in turn, each from the signal until it first reads not ready.
    probed_s: dict[str, float] = {}
    with httpx.Client(base_url=server.url, timeout=5) as probe:
        while len(probed_s) < 2 and time.monotonic() - signalled < 5:
            if "http" not in probed_s and probe.get("/v2/health/ready").status_code == 503:
                probed_s["http"] = time.monotonic() - signalled
            if "grpc" not in probed_s and _health(channel) == NOT_SERVING:
                probed_s["grpc"] = time.monotonic() - signalled
    assert set(probed_s) == {"http", "grpc"}, probed_s
    # When readiness turned false, by the front's own clock (CLOCK_MONOTONIC, the host's): the
    # probes' figures add their own round trips, which a loaded 2-core machine stretches.
    began = float(re.search(r"draining \(not ready\) since monotonic ([\d.]+)", server.log())[1])
    assert 0 <= began - signalled < 0.1, (began - signalled, probed_s)
    assert max(probed_s.values()) < 1.0, probed_s

    # Draining: alive, not ready, new work refused on both protocols, on new connections too.
    with httpx.Client(base_url=server.url, timeout=5) as fresh:
        assert fresh.get("/health/live").status_code == 200
        assert fresh.get("/health/ready").status_code == 503
        refused = fresh.post("/infer", json=body)
        assert refused.status_code == 503 and "shutting down" in refused.json()["error"]
    with pytest.raises(InferenceServerException) as caught:
        _grpc_infer(one, "slow", x)
    assert "UNAVAILABLE" in str(caught.value) or "shutting down" in str(caught.value)

    # What was in flight completes, then the server exits, every process with it.
    rest.join(30)
    rpc.join(30)
    assert "error" not in rest_result, rest_result
    assert rest_result["value"].status_code == 200 and rest_result["value"].json() == expected
    assert "error" not in rpc_result, rpc_result
    np.testing.assert_allclose(rpc_result["value"].reshape(-1), expected["outputs"][0]["data"])
    assert server.process.wait(20) == 0
    stopped_s = time.monotonic() - signalled
    assert stopped_s < QUEUED_S + 5, stopped_s
    channel.close()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in processes)
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", server.port)) != 0  # refused: nothing listens


def test_work_outliving_the_grace_is_cut_and_the_server_still_stops(
    start_server, dynamic_batch_program
):
    server = start_server("--shutdown-grace", "1")
    _queued_model(server, dynamic_batch_program, queued_s=10)
    body = {"model": "slow", "inputs": [tensor(np.ones((1, 4), np.float32))]}
    rest, rest_result = _in_background(
        lambda: httpx.post(f"{server.url}/infer", json=body, timeout=30)
    )
    time.sleep(0.5)
    signalled = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(20) == 0
    stopped_s = time.monotonic() - signalled
    rest.join(10)
    # Cut at the grace: the client sees an error answer or a closed connection, not a hang.
    assert "error" in rest_result or rest_result["value"].status_code >= 500, rest_result
    assert stopped_s < 1 + 4, stopped_s  # the grace, a second for uvicorn, the stops
