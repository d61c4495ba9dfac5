"""Issue 34, item 8, with raw sockets against a real server: requests followed by a half-close
(shutdown(SHUT_WR)) are answered, in order, and then the server closes the connection; on the
fronts' native path (a small /infer that arrives whole), on uvicorn's path (health, a v2 binary
body larger than the native path takes) and on a mix of both pipelined. A request cut short by
the half-close gets no answer and the connection closes at once.
"""

import json
import re
import socket
import time

import numpy as np
import pytest

from support.program_fixtures import image_program, linear_relu_program  # noqa: F401
from support.prometheus import parse, series
from support.server import upload


@pytest.fixture(scope="module")
def served(shared_server, linear_relu_program, image_program):  # noqa: F811
    with shared_server.client() as client:
        assert upload(client, "m", linear_relu_program.pte).status_code == 201
        assert upload(client, "image", image_program.pte).status_code == 201
    return shared_server


def _post(path: str, body: bytes, headers: dict | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "host: x", f"content-length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _native_infer() -> bytes:
    body = {"model": "m", "inputs": [{"shape": [2, 4], "datatype": "FP32", "data": [1.0] * 8}]}
    return _post("/infer", json.dumps(body).encode(), {"content-type": "application/json"})


def _v2_binary() -> bytes:
    """A v2 binary image request (588 KiB), past what the native path takes."""
    x = np.ones((1, 3, 224, 224), np.float32)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "input_0",
                    "shape": [1, 3, 224, 224],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ]
        }
    ).encode()
    return _post(
        "/v2/models/image/infer",
        header + x.tobytes(),
        {"inference-header-content-length": str(len(header))},
    )


def _send_then_half_close(port: int, data: bytes) -> bytes:
    """Everything the server sends until it closes (fails if it does not within 20 s)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(20)
        received = b""
        while chunk := sock.recv(1 << 20):
            received += chunk
    return received


def _statuses(received: bytes) -> list[int]:
    return [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", received)]


def _native_count(server) -> float:
    with server.client() as client:
        return sum(
            series(parse(client.get("/metrics").text), "etrt_front_native_requests_total").values()
        )


def test_a_request_on_the_native_path_then_half_close_is_answered_then_closed(served):
    # The engine's lane serves a method once it has run: the first request warms it up.
    assert _statuses(_send_then_half_close(served.port, _native_infer())) == [200]
    before = _native_count(served)
    received = _send_then_half_close(served.port, _native_infer())
    assert _statuses(received) == [200], received[:500]
    assert b'"model":"m"' in received
    deadline = time.monotonic() + 5  # the fronts report their counts every half second
    while _native_count(served) == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _native_count(served) > before, "the native path answered it"


def test_requests_on_uvicorns_path_then_half_close_are_answered_then_closed(served):
    health = b"GET /v2/health/ready HTTP/1.1\r\nhost: x\r\n\r\n"
    assert _statuses(_send_then_half_close(served.port, health)) == [200]
    received = _send_then_half_close(served.port, _v2_binary())
    assert _statuses(received) == [200], received[:500]


def test_pipelined_requests_of_both_paths_then_half_close_are_all_answered_in_order(served):
    health = b"GET /v2/health/live HTTP/1.1\r\nhost: x\r\n\r\n"
    received = _send_then_half_close(
        served.port, _native_infer() + _v2_binary() + health + _native_infer()
    )
    assert _statuses(received) == [200, 200, 200, 200], received[:800]
    assert b'{"live":true}' in received


def test_a_request_cut_short_by_the_half_close_is_closed_unanswered(served):
    cut = _v2_binary()[:-1000]
    assert _send_then_half_close(served.port, cut) == b""
