"""A client that goes away mid-body is the client's doing: on every route that reads a body the
server logs one INFO line with outcome=aborted, never an ERROR or a traceback, and keeps serving.
Model "m" exists: v2 infer answers an unknown model before it reads any of the body.
"""

import json
import socket
import time

import pytest

from support.program_fixtures import linear_relu_program  # noqa: F401
from support.server import upload

SENT = b'{"inputs": [{"name": "input_0", "datatype": "FP32", "shape": [1], "data": [1'
LOAD = b'{"parameters": {"config": "{}", "file:1/model.pte": "AAAA'
CASES = {
    "v2 JSON infer": ("/v2/models/m/infer", SENT, {}),
    "v2 binary infer": (
        "/v2/models/m/infer",
        SENT,
        {"Inference-Header-Content-Length": "200"},
    ),
    "native infer": ("/infer", SENT, {}),
    "repository load, before a file": ("/v2/repository/models/m/load", LOAD[:20], {}),
    "repository load, mid-file": ("/v2/repository/models/m/load", LOAD, {}),
    "upload": (
        "/models",
        b"--b\r\nContent-Disposition: form-data; name=name\r\n\r\nm\r\n--b\r\n",
        {"Content-Type": "multipart/form-data; boundary=b"},
    ),
}


def _send_part_then_vanish(port: int, path: str, body: bytes, headers: dict) -> None:
    lines = [f"POST {path} HTTP/1.1", "Host: x", f"Content-Length: {len(body) + 100_000}"]
    lines += [f"{key}: {value}" for key, value in headers.items()]
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        time.sleep(0.3)


@pytest.fixture(scope="module")
def served(shared_server, linear_relu_program):
    with shared_server.client() as client:
        assert upload(client, "m", linear_relu_program.pte).status_code == 201
    return shared_server


@pytest.mark.parametrize("case", CASES)
def test_a_client_that_disconnects_mid_body_is_logged_as_aborted(served, case):
    shared_server = served
    path, body, headers = CASES[case]
    before = len(shared_server.log())
    _send_part_then_vanish(shared_server.port, path, body, headers)
    deadline = time.monotonic() + 20
    while "outcome=aborted" not in shared_server.log()[before:] and time.monotonic() < deadline:
        time.sleep(0.1)
    log = shared_server.log()[before:]
    assert "outcome=aborted" in log, log
    aborted = [line for line in log.splitlines() if "outcome=aborted" in line]
    assert all(" INFO " in line for line in aborted), aborted
    assert "Traceback" not in log and "ERROR" not in log, log
    with shared_server.client() as client:
        assert client.get("/v2/health/live").json() == {"live": True}
        assert json.loads(client.get("/models").text) is not None
