"""The fronts' native path on a long-lived server (issue 36): after each kind of abuse (a flood
that fills a bounded queue and one that does not, 16 stalled binary heads, two 60 MB JSON
bodies) whole requests are still answered 200 and each front's etrt_front_native_requests_total
still moves. The cause found: a full queue's refusal on record in a front's gate closes that
front's native path for every model (EngineRequests.lane_link), and the record was forgotten
only when its model was asked for again; after a flood's last refusal, nobody may ask, and the
native path stayed off for good (the burst below leaves such a record in every front)."""

from __future__ import annotations

import json
import socket
import time

import numpy as np
import pytest

from support import programs
from support.flood import _http_requests, flood
from support.program_fixtures import linear_relu_program  # noqa: F401
from support.prometheus import parse, series
from support.server import ServerProcess, upload

FRONTS = 2
BOUNDED_QUEUE = 2


def _request(path: str, body: bytes, extra: str = "") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


def _status(sock: socket.socket) -> int:
    """The status of one answer, read whole off the connection."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed"
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    fields = dict(
        line.lower().split(b": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line
    )  # fmt: skip
    length = int(fields[b"content-length"])
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed"
        rest += chunk
    return int(head.split(b" ")[1])


def _native_counts(server) -> dict:
    with server.client() as client:
        found = series(parse(client.get("/metrics").text), "etrt_front_native_requests_total")
    return {dict(labels)["front"]: count for labels, count in found.items()}


@pytest.fixture(scope="module")
def heavy(programs_dir):
    return programs.export_cpu_heavy(programs_dir, rounds=50, size=16384)


@pytest.fixture(scope="module")
def served(tmp_path_factory, linear_relu_program, heavy):  # noqa: F811
    server = ServerProcess(
        tmp_path_factory.mktemp("soak") / "artifacts", "--workers", str(FRONTS)
    ).start()
    bounded = {
        "dynamic_batching": {"default_queue_policy": {"max_queue_size": BOUNDED_QUEUE}},
        "instance_group": [{"count": 1}],
    }
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
        created = upload(client, "bounded", heavy.pte, fields={"config": json.dumps(bounded)})
        assert created.status_code == 201, created.text
    x = linear_relu_program.example_inputs[0].numpy()
    yield server, x, heavy.example_inputs[0].numpy()
    server.stop()


def _request_of(path: str, model: str, x: np.ndarray) -> bytes:
    body = json.dumps(
        {"model": model, "inputs": [{"shape": list(x.shape), "datatype": "FP32",
                                     "data": x.ravel().tolist()}]}
    ).encode()  # fmt: skip
    return _request(path, body)


def _whole(x: np.ndarray) -> bytes:
    return _request_of("/infer", "lin", x)


def _burst(server, raw: bytes, count: int) -> list[int]:
    """`count` requests sent at once on connections of their own: their statuses."""
    socks = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(count)]
    try:
        for sock in socks:
            sock.sendall(raw)
        return [_status(sock) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def _assert_native_path_takes_requests(server, x: np.ndarray, after: str) -> None:
    """Whole requests on fresh connections (so both fronts get some) are answered 200, and every
    front's native count moves (fronts report it every half second)."""
    before = _native_counts(server)
    raw, statuses = _whole(x), []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        for _ in range(20):
            with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
                sock.sendall(raw)
                statuses.append(_status(sock))
        time.sleep(0.6)
        now = _native_counts(server)
        moved = [f for f in now if now[f] > before.get(f, 0)]
        if len(moved) == FRONTS:
            break
    assert set(statuses) == {200}, (after, statuses)
    assert len(moved) == FRONTS, (after, before, now)


def test_the_native_path_still_takes_requests_after_each_kind_of_abuse(served):
    server, x, heavy_x = served
    _assert_native_path_takes_requests(server, x, "a fresh server")

    # A flood on a model with a bounded queue (refusals on record in each front's gate), and
    # on one without.
    for model, data in (("bounded", heavy_x), ("lin", x)):
        outcomes = flood(
            server.port, server.grpc_url, model, data, 3.0, 16, ("native JSON", "v2 binary")
        ).values()
        assert sum(o.ok for o in outcomes) > 0, outcomes
        if model == "bounded":  # the queue was full, and said so
            assert sum(o.refused for o in outcomes) > 0, outcomes
            # And a last burst, refused in every front, after which nobody asks for that
            # model again: what a flood's end leaves on record, whatever came last.
            assert 503 in _burst(server, _http_requests("bounded", data)["v2 binary"], 48)
        _assert_native_path_takes_requests(server, x, f"a flood on {model!r}")

    # 16 binary heads that declare 32 MB each and stall after their JSON header.
    header = json.dumps(
        {"inputs": [{"name": "input_0", "datatype": "FP32", "shape": [8 << 20],
                     "parameters": {"binary_data_size": 32 << 20}}]}
    ).encode()  # fmt: skip
    stalled = []
    for _ in range(16):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        head = _request(
            "/v2/models/lin/infer", b"", f"Inference-Header-Content-Length: {len(header)}\r\n"
        ).replace(b"Content-Length: 0", f"Content-Length: {len(header) + (32 << 20)}".encode())
        sock.sendall(head + header + b"\0" * 4096)
        stalled.append(sock)
    time.sleep(1.0)
    _assert_native_path_takes_requests(server, x, "stalled binary heads, still open")
    for sock in stalled:
        sock.close()
    _assert_native_path_takes_requests(server, x, "stalled binary heads, gone")

    # Two 60 MB JSON bodies (a shape the model refuses once they are read).
    big = b'{"model":"lin","inputs":[{"datatype":"FP32","shape":[15000000],"data":['
    big += b"0.5," * 14_999_999 + b"0.5]}]}"
    for _ in range(2):
        with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
            sock.sendall(_request("/infer", big))
            assert _status(sock) == 422
    _assert_native_path_takes_requests(server, x, "60 MB JSON bodies")
