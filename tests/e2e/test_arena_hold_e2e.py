"""Issue 34, item 1, against a real server with two fronts: connections that send the head of a
large v2 binary request and then nothing hold a megabyte of arena each, not the body they
declare, so image-sized requests of another client keep being served; after the body timeout
each gets a 408 naming the timeout and the setting, its connection closes and the arenas are
empty again. A head that never completes gets its 408 too.
"""

import http.client
import json
import socket
import time

import numpy as np
import pytest

from support.program_fixtures import image_program  # noqa: F401
from support.prometheus import parse, series
from support.server import upload

BODY_TIMEOUT_S = 5
HEADER = "Inference-Header-Content-Length"
IDLE_HEADS = 16
DECLARED = 256 * 1024 * 1024


@pytest.fixture(scope="module")
def server(start_server_module, image_program):  # noqa: F811
    server = start_server_module(
        "--workers", "2", "--body-timeout", str(BODY_TIMEOUT_S), "--header-timeout", "3"
    )
    with server.client() as client:
        assert upload(client, "image", image_program.pte).status_code == 201
    return server


@pytest.fixture(scope="module")
def start_server_module(tmp_path_factory):
    from support.server import ServerProcess

    started = []

    def start(*args):
        server = ServerProcess(tmp_path_factory.mktemp("hold") / "artifacts", *args).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def _binary(shape, payload_bytes: int) -> tuple[bytes, int]:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "input_0",
                    "shape": list(shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": payload_bytes},
                }
            ]
        }
    ).encode()
    return header, len(header)


def _idle_head(port: int) -> socket.socket:
    """A head declaring a DECLARED-byte body, the JSON header, then nothing."""
    header, length = _binary([1, 3, 224, 224], DECLARED - 200)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        b"POST /v2/models/image/infer HTTP/1.1\r\nhost: x\r\n"
        + f"content-length: {DECLARED}\r\n{HEADER}: {length}\r\n\r\n".encode()
        + header
    )
    return sock


def _image_request(port: int, x: np.ndarray) -> int:
    header, length = _binary(x.shape, x.nbytes)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request(
        "POST",
        "/v2/models/image/infer",
        body=header + x.tobytes(),
        headers={HEADER: str(length), "content-type": "application/octet-stream"},
    )
    status = connection.getresponse().status
    connection.close()
    return status


def _in_use(server) -> list[float]:
    with server.client() as client:
        samples = series(parse(client.get("/metrics").text), "etrt_arena_bytes")
    return [v for labels, v in samples.items() if dict(labels)["state"] == "in_use"]


def _answer(sock: socket.socket) -> bytes:
    sock.settimeout(BODY_TIMEOUT_S + 10)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_idle_heads_hold_little_and_are_dropped_with_408_after_the_body_timeout(server):
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    # Each front's first binary request starts its decoding workers (seconds on 2 cores).
    assert [_image_request(server.port, x) for _ in range(6)] == [200] * 6
    heads = [_idle_head(server.port) for _ in range(IDLE_HEADS)]
    begun = time.monotonic()
    statuses = []
    while time.monotonic() - begun < BODY_TIMEOUT_S - 1.5:
        statuses.append(_image_request(server.port, x))
    assert len(statuses) >= 10 and set(statuses) == {200}, statuses
    # The heads hold what arrived (a first step of a megabyte each), not 16 x 256 MiB.
    held = sum(_in_use(server))
    assert 0 < held <= IDLE_HEADS * 2 * 1024 * 1024, held
    for sock in heads:
        answer = _answer(sock)
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        body = json.loads(answer.partition(b"\r\n\r\n")[2])
        assert [p["rule"] for p in body["problems"]] == ["request.timeout"]
        assert "--body-timeout" in body["error"], body
        sock.close()
    waited = time.monotonic() - begun
    assert BODY_TIMEOUT_S - 0.5 <= waited <= BODY_TIMEOUT_S + 5, waited
    deadline = time.monotonic() + 5  # the fronts report their arenas every half second
    while any(_in_use(server)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_in_use(server)), _in_use(server)
    assert _image_request(server.port, x) == 200


def test_a_head_that_never_completes_gets_408_after_the_header_timeout(server):
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /v2/models/image/infer HTTP/1.1\r\nhost: x\r\n")
    begun = time.monotonic()
    answer = _answer(sock)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert "--header-timeout" in json.loads(answer.partition(b"\r\n\r\n")[2])["error"]
    assert 2.5 <= time.monotonic() - begun <= 8
