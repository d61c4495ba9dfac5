"""Requests cut anywhere and pipelined, through a real server with two fronts: every answer is
the bytes the Python path writes for that request sent alone (the date aside).

A connection's bytes reach a front in reads of any size: a head may arrive in pieces, a body
after its head, several requests in one read. Each piece decides which path answers: the
native path takes a whole request on an idle connection, uvicorn's parser reads the rest (a
head cut short, requests pipelined behind one that runs), and a Python answer is written by the
transport itself or, behind another request, through uvicorn's send. Whichever it was, the
client must not be able to tell: this found the two Python ways writing a binary answer's
headers in different orders, and the health probes answered where they arrive writing theirs
in another order than the routes. Seeded cases of nine kinds of request (v2 JSON and binary,
a 602 KB image, the native API, three refusals, two probes), one to four a connection, cut at
up to five random places with pauses of up to 50 ms between the pieces."""

import json
import random
import re
import socket
import time

import numpy as np
import pytest

from support.program_fixtures import image_program, linear_relu_program  # noqa: F401
from support.prometheus import parse, series
from support.server import upload

CASES = 400
SECONDS = 60  # at most, on a loaded machine
X = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
IMAGE = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
_LENGTH = re.compile(rb"\r\ncontent-length: (\d+)", re.IGNORECASE)
_DATE = re.compile(rb"\r\ndate: [^\r]*", re.IGNORECASE)


def _post(path: str, content_type: str, body: bytes, extra: str = "") -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nhost: t\r\ncontent-type: {content_type}\r\n{extra}"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _v2_json(query: str, shape=(2, 4)) -> bytes:
    tensor = {"name": "input_0", "shape": list(shape), "datatype": "FP32"}
    body = json.dumps({"inputs": [{**tensor, "data": X.ravel().tolist()}]}).encode()
    return _post(f"/v2/models/lin/infer{query}", "application/json", body)


def _v2_binary(query: str, model: str = "lin", x: np.ndarray = X, size: int | None = None) -> bytes:
    header = {
        "inputs": [
            {
                "name": "input_0",
                "shape": list(x.shape),
                "datatype": "FP32",
                "parameters": {"binary_data_size": x.nbytes if size is None else size},
            }
        ],
        "outputs": [{"name": "output_0", "parameters": {"binary_data": True}}],
    }
    text = json.dumps(header).encode()
    return _post(
        f"/v2/models/{model}/infer{query}",
        "application/octet-stream",
        text + x.tobytes(),
        f"inference-header-content-length: {len(text)}\r\n",
    )


def _native(query: str) -> bytes:
    tensor = {"shape": [2, 4], "datatype": "FP32", "data": X.ravel().tolist()}
    body = json.dumps({"model": "lin", "inputs": [tensor]}).encode()
    return _post(f"/infer{query}", "application/json", body)


def _probe(path: str):
    return lambda query: f"GET {path}{query} HTTP/1.1\r\nhost: t\r\n\r\n".encode()


KINDS = {
    "v2 JSON": _v2_json,
    "v2 binary": _v2_binary,
    "native": _native,
    "a shape the method cannot take": lambda query: _v2_json(query, shape=(4, 2)),
    "no such model": lambda query: _v2_binary(query, model="nope"),
    "a binary size that is not the tensor's": lambda query: _v2_binary(query, size=X.nbytes - 1),
    # Its body may arrive after its head and in pieces: taken as it comes, into its arena slot;
    # its answer is as large (sent in parts through uvicorn on the Python path).
    "an image": lambda query: _v2_binary(query, model="image", x=IMAGE),
    # Whole and alone, a probe is answered where it arrives (health.py's InlineProbes).
    "a readiness probe": _probe("/v2/health/ready"),
    "a liveness probe": _probe("/health/live"),
}


def _answers(sock: socket.socket, count: int) -> list[bytes]:
    """`count` answers framed by their content-length, each without its date header."""
    buffer, found = b"", []
    while len(found) < count:
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            assert chunk, ("the connection closed", found, buffer)
            buffer += chunk
        head, _, rest = buffer.partition(b"\r\n\r\n")
        length = int(_LENGTH.search(head).group(1))
        while len(rest) < length:
            chunk = sock.recv(65536)
            assert chunk, ("the connection closed mid-answer", found, head)
            rest += chunk
        found.append(_DATE.sub(b"", head) + b"\r\n\r\n" + rest[:length])
        buffer = rest[length:]
    return found


@pytest.fixture(scope="module")
def server(tmp_path_factory, linear_relu_program, image_program):  # noqa: F811
    from support.server import ServerProcess

    server = ServerProcess(
        tmp_path_factory.mktemp("framing") / "artifacts", "--workers", "2"
    ).start()
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
        assert upload(client, "image", image_program.pte).status_code == 201
    yield server
    server.stop()


def _native_count(server) -> float:
    with server.client() as client:
        return sum(
            series(parse(client.get("/metrics").text), "etrt_front_native_requests_total").values()
        )


def test_requests_cut_anywhere_and_pipelined_get_the_python_paths_bytes(server):
    expected = {}
    for kind, raw in KINDS.items():
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(raw("?path=python"))  # a query string: never the native path's
            expected[kind] = _answers(sock, 1)[0]
    assert expected["v2 binary"].startswith(b"HTTP/1.1 200 "), expected
    assert expected["no such model"].startswith(b"HTTP/1.1 404 "), expected
    before = _native_count(server)
    rng = random.Random(36)
    ends = time.monotonic() + SECONDS
    done = 0
    while done < CASES and time.monotonic() < ends:
        kinds = [rng.choice(list(KINDS)) for _ in range(rng.randint(1, 4))]
        raw = b"".join(KINDS[kind]("") for kind in kinds)
        cuts = sorted(rng.sample(range(1, len(raw)), rng.randint(0, 5)))
        pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)])]
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            for piece in pieces:
                sock.sendall(piece)
                if rng.random() < 0.5:
                    time.sleep(rng.choice((0, 0.001, 0.01, 0.05)))
            got = _answers(sock, len(kinds))
        for kind, answer in zip(kinds, got):
            assert answer == expected[kind], (kinds, [len(p) for p in pieces], kind, answer)
        done += 1
    assert done >= CASES // 4, f"only {done} cases in {SECONDS} s"
    # Both paths were exercised: the native path answered some of them.
    deadline = time.monotonic() + 5  # the fronts report their counts every half second
    while _native_count(server) <= before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _native_count(server) > before
