"""Requests whose client left before they ran are not run (issue 34, items 4 and 7).

One slow model with one instance (programs.export_slow: 0.5 to 1 s per execute here), ten
requests queued behind each other, nine of whose clients go away: the server's own statistics
(execution_count) must show at most two executes (the one kept, and one that was already
claimed when its client left), and its metrics the nine as outcome="cancelled". Over HTTP on
both front paths (the native path takes a plain v2 binary request; a `method` parameter sends it
down the ASGI route and the engine's Python scheduler), with the clients closing their sockets
after the request, which the server tells from a half-close by a probe (half_close.py); over
gRPC by cancelling the call, and by a deadline that passes while it is queued.

A half-closed client (shutdown(SHUT_WR) after its request) gets its whole answer, then EOF.
"""

import json
import socket
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from support import programs
from support.prometheus import parse, value
from support.server import upload

QUEUED = 10
EXECUTE_S = 0.6


@pytest.fixture(scope="module")
def slow(programs_dir):
    return programs.export_slow(programs_dir, rounds=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory, slow):
    from support.server import ServerProcess

    started = ServerProcess(tmp_path_factory.mktemp("cancel") / "artifacts").start()
    config = {"instance_group": [{"count": 1}]}
    with started.client() as client:
        created = upload(client, "slow", slow.pte, slow.ptds, fields={"config": json.dumps(config)})
        assert created.status_code == 201, created.text
        x = slow.example_inputs[0].numpy()
        for _ in range(2):  # the first executes, in Python, measure it: later ones go the lane
            sock = _send(started.port, _binary_request(x))
            assert _read_answer(sock).startswith(b"HTTP/1.1 200"), "warm-up failed"
            sock.close()
    yield started
    started.stop()


def _binary_request(x: np.ndarray, asgi: bool = False) -> bytes:
    head = {"inputs": [{"name": "input_0", "shape": list(x.shape), "datatype": "FP32"}]}
    head["inputs"][0]["parameters"] = {"binary_data_size": x.nbytes}
    if asgi:  # a parameter the native path leaves to the ASGI route
        head["parameters"] = {"method": "forward"}
    header = json.dumps(head).encode()
    body = header + x.astype(np.float32).tobytes()
    return (
        f"POST /v2/models/slow/infer HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Inference-Header-Content-Length: {len(header)}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def _send(port: int, request: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(request)
    return sock


def _read_answer(sock: socket.socket, timeout_s: float = 30.0) -> bytes:
    """Everything the server sends until it closes the connection, or a whole final answer."""
    sock.settimeout(timeout_s)
    got = b""
    while True:
        final = got.replace(b"HTTP/1.1 100 Continue\r\n\r\n", b"")
        end = final.find(b"\r\n\r\n")
        if end >= 0:
            head = final[:end].decode("latin-1").lower()
            length = [
                int(line.split(":")[1]) for line in head.split("\r\n") if "content-length" in line
            ]
            if length and len(final) >= end + 4 + length[0]:
                return got
        chunk = sock.recv(65536)
        if not chunk:
            return got
        got += chunk


def _stats(server, outcome: str = "cancelled") -> tuple[int, float]:
    """(execution_count from the statistics extension, requests counted with `outcome`)."""
    with server.client() as client:
        stats = client.get("/v2/models/slow/stats").json()["model_stats"][0]
        metrics = parse(client.get("/metrics").text)
    counted = value(
        metrics, "etrt_inference_requests_total", model="slow", method="forward", outcome=outcome
    )
    return stats["execution_count"], counted or 0


def _native_taken(server) -> float:
    """Requests the front's native path took, so far: the front reports its count every half
    second or so, so it is read until it holds still."""
    last = None
    for _ in range(20):
        with server.client() as client:
            metrics = parse(client.get("/metrics").text)
        taken = value(metrics, "etrt_front_native_requests_total", front="0") or 0
        if taken == last:
            return taken
        last = taken
        time.sleep(1.0)
    return last


def _wait_for(server, at_least: float, outcome: str = "cancelled") -> float:
    """The count of `outcome` once it reaches `at_least` (or after 20 s)."""
    deadline = time.monotonic() + 20
    while True:
        _, counted = _stats(server, outcome)
        if counted >= at_least or time.monotonic() > deadline:
            return counted
        time.sleep(0.1)


@pytest.mark.parametrize("asgi", [False, True], ids=["native path", "ASGI route"])
def test_queued_requests_whose_clients_closed_are_not_executed(server, slow, asgi):
    x = slow.example_inputs[0].numpy()
    executions0, cancelled0 = _stats(server)
    taken0 = _native_taken(server)
    request = _binary_request(x, asgi)
    kept = _send(server.port, request)
    time.sleep(0.05)  # the kept one runs first
    gone = [_send(server.port, request) for _ in range(QUEUED - 1)]
    time.sleep(0.15)  # all of them queued for the one instance, the kept one running
    for sock in gone:
        sock.close()
    answer = _read_answer(kept)
    kept.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    cancelled = _wait_for(server, cancelled0 + QUEUED - 1)
    time.sleep(3 * EXECUTE_S)  # had one of them stayed queued, it would run now
    executions, _ = _stats(server)
    assert executions - executions0 <= 2, (executions0, executions)
    assert cancelled - cancelled0 >= QUEUED - 2, (cancelled0, cancelled)
    assert _native_taken(server) - taken0 == (0 if asgi else QUEUED)  # the path it names


@pytest.mark.parametrize("asgi", [False, True], ids=["native path", "ASGI route"])
def test_a_half_closed_client_gets_its_whole_answer_then_eof(server, slow, asgi):
    x = slow.example_inputs[0].numpy()
    executions0, _ = _stats(server)
    busy = _send(server.port, _binary_request(x))  # so the half-closed one waits in the queue
    time.sleep(0.05)
    sock = _send(server.port, _binary_request(x, asgi))
    sock.shutdown(socket.SHUT_WR)
    got = _read_answer(sock)
    assert got.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200"), got[:300]
    body = got[got.index(b"\r\n\r\n", 30) + 4 :]
    assert b'"outputs"' in body, got[:300]
    sock.settimeout(10)
    assert sock.recv(1) == b"", "the connection stays open after the answer"
    sock.close()
    _read_answer(busy)
    busy.close()
    executions, _ = _stats(server)
    assert executions - executions0 == 2


def _grpc_inputs(x: np.ndarray):
    tensor = grpcclient.InferInput("input_0", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)
    return [tensor]


def test_grpc_calls_cancelled_while_queued_are_not_executed(server, slow):
    x = slow.example_inputs[0].numpy()
    executions0, cancelled0 = _stats(server)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        done = []
        kept = client.async_infer(
            "slow", _grpc_inputs(x), callback=lambda result, error: done.append(error)
        )
        time.sleep(0.05)
        calls = [
            client.async_infer("slow", _grpc_inputs(x), callback=lambda result, error: None)
            for _ in range(QUEUED - 1)
        ]
        time.sleep(0.15)
        for call in calls:
            call.cancel()
        deadline = time.monotonic() + 30
        while not done and time.monotonic() < deadline:
            time.sleep(0.05)
        assert done == [None], done
        del kept
    cancelled = _wait_for(server, cancelled0 + QUEUED - 1)
    time.sleep(3 * EXECUTE_S)
    executions, _ = _stats(server)
    assert executions - executions0 <= 2, (executions0, executions)
    assert cancelled - cancelled0 >= QUEUED - 2, (cancelled0, cancelled)


def test_grpc_deadlines_that_pass_while_queued_are_answered_and_not_executed(server, slow):
    x = slow.example_inputs[0].numpy()
    executions0, expired0 = _stats(server, "deadline_exceeded")
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        done = []
        client.async_infer(
            "slow", _grpc_inputs(x), callback=lambda result, error: done.append(error)
        )
        time.sleep(0.05)
        errors = []
        for _ in range(QUEUED - 1):
            client.async_infer(
                "slow",
                _grpc_inputs(x),
                callback=lambda result, error: errors.append(error),
                client_timeout=0.3,
            )
        deadline = time.monotonic() + 30
        while (not done or len(errors) < QUEUED - 1) and time.monotonic() < deadline:
            time.sleep(0.05)
    assert done == [None], done
    assert len(errors) == QUEUED - 1
    # The first of them may get the instance before its deadline, when the kept one is quick.
    expired_calls = [e for e in errors if e is not None]
    assert len(expired_calls) >= QUEUED - 2, errors
    assert all(isinstance(e, InferenceServerException) for e in expired_calls), errors
    assert {e.status() for e in expired_calls} == {"StatusCode.DEADLINE_EXCEEDED"}, errors
    expired = _wait_for(server, expired0 + len(expired_calls), "deadline_exceeded")
    time.sleep(3 * EXECUTE_S)
    executions, _ = _stats(server)
    assert executions - executions0 <= 2, (executions0, executions)
    assert expired - expired0 >= QUEUED - 2, (expired0, expired)
