"""v2 REST infer answers an unknown model or version, and missing credentials, before it reads
any of the body: a request declaring a 256 MiB body and sending none of it gets its 404 (or 401)
at once, where it would otherwise hold a connection and memory until the body arrived."""

from __future__ import annotations

import json
import socket

import pytest

from support.program_fixtures import linear_relu_program  # noqa: F401
from support.server import ServerProcess, upload

DECLARED = 268434432  # what issue 20's probe declared


def _headers_only(server, path: str, binary: bool, extra: str = "") -> socket.socket:
    """Sends a POST's headers declaring DECLARED body bytes, and none of the body."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: 127.0.0.1:{server.port}",
        "Content-Type: application/octet-stream" if binary else "Content-Type: application/json",
        f"Content-Length: {DECLARED}",
    ]
    if binary:
        lines.append("Inference-Header-Content-Length: 100")
    sock.sendall(("\r\n".join(lines) + "\r\n" + extra + "\r\n").encode())
    return sock


def _answer(sock: socket.socket, timeout: float) -> tuple[int, dict] | None:
    """(status, JSON body) of the answer, or None when none came within `timeout`."""
    sock.settimeout(timeout)
    received = b""
    try:
        while b"\r\n\r\n" not in received:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        head, _, body = received.partition(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        while len(body) < length:
            body += sock.recv(65536)
    except TimeoutError:
        return None
    finally:
        sock.close()
    return int(head.split()[1]), json.loads(body)


@pytest.fixture(scope="module")
def served(shared_server, linear_relu_program):
    with shared_server.client() as client:
        assert upload(client, "m", linear_relu_program.pte).status_code == 201
    return shared_server


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize(
    "path, names",
    [
        ("/v2/models/nothing/infer", "'nothing' not found"),
        ("/v2/models/nothing/versions/1/infer", "'nothing' not found"),
        ("/v2/models/m/versions/7/infer", "'m' has no version 7"),
    ],
)
def test_an_unknown_model_or_version_is_answered_before_the_body(served, path, names, binary):
    answer = _answer(_headers_only(served, path, binary), timeout=10)
    assert answer is not None, "no answer before the body"
    status, body = answer
    assert status == 404 and names in body["error"], body


def test_a_served_model_waits_for_its_body(served):
    """The control: the same request for a model that serves is read as usual."""
    assert _answer(_headers_only(served, "/v2/models/m/infer", True), timeout=1.5) is None


def test_missing_credentials_are_answered_before_the_body(tmp_path):
    with ServerProcess(tmp_path / "artifacts", env={"ETRT_INFER_TOKEN": "infer-5a1c"}) as server:
        for path in ("/v2/models/nothing/infer", "/infer"):
            answer = _answer(_headers_only(server, path, binary=False), timeout=10)
            assert answer is not None and answer[0] == 401, (path, answer)
