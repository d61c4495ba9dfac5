"""Image-sized v2 binary bodies taken by the fronts' native path before they arrived whole
(service/front/native_path.py, runtime_ext/front/body_stream.h), through a real server with two
fronts: a 602 KB request sent whole and sent in pieces (the head and JSON header first, the
tensor bytes in slow chunks) gets the same bytes as the Python path's answer (the same URL with a
query string, which the native path never takes; the date aside), and the native
path counts both; a client
that leaves mid-body or stalls (408 after the body timeout) leaves no slot held. Image-sized
answers of several outputs, some asked as binary data and some as JSON, written by the native
path from their arena slot to the socket (runtime_ext/front/answer_send.h), are the Python
path's bytes too, also when answers queue behind each other on one connection."""

import json
import socket
import threading
import time

import numpy as np
import pytest

from support.program_fixtures import image_program, linear_relu_program  # noqa: F401
from support.prometheus import parse, series
from support.server import upload

BODY_TIMEOUT_S = 3
HEADER = "Inference-Header-Content-Length"


@pytest.fixture(scope="module")
def three_outputs(programs_dir):
    """Two image-sized outputs and a small one, from a 1x3x224x224 FP32 image."""
    import torch

    from support.programs import export_module

    class ThreeOutputs(torch.nn.Module):
        def forward(self, x):
            return x * 2 + 1, x - 0.5, x[:, :, :2, :3] * 3

    return export_module(
        programs_dir, "three_image_outputs", ThreeOutputs(), (torch.zeros(1, 3, 224, 224),)
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory, image_program, three_outputs):  # noqa: F811
    from support.server import ServerProcess

    server = ServerProcess(
        tmp_path_factory.mktemp("streamed") / "artifacts",
        "--workers",
        "2",
        "--body-timeout",
        str(BODY_TIMEOUT_S),
    ).start()
    with server.client() as client:
        assert upload(client, "image", image_program.pte).status_code == 201
        assert upload(client, "three", three_outputs.pte).status_code == 201
    yield server
    server.stop()


def _raw(
    x: np.ndarray, query: str = "", model: str = "image", outputs: dict | None = None
) -> tuple[bytes, int]:
    """(the request, where its tensor bytes begin). `outputs`: name -> asked as binary data."""
    asked = [
        {"name": name, "parameters": {"binary_data": binary}}
        for name, binary in (outputs or {"output_0": True}).items()
    ]
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "input_0",
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "outputs": asked,
        }
    ).encode()
    head = (
        f"POST /v2/models/{model}/infer{query} HTTP/1.1\r\nhost: t\r\n"
        f"content-length: {len(header) + x.nbytes}\r\n{HEADER}: {len(header)}\r\n\r\n"
    ).encode()
    return head + header + x.tobytes(), len(head) + len(header)


def _answers(sock: socket.socket, count: int) -> list[bytes]:
    """`count` whole answers, each its status line, its headers sorted and its body."""
    buffer, found = b"", []
    while len(found) < count:
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(1 << 20)
            assert chunk, ("the connection closed", found, buffer[:300])
            buffer += chunk
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in lines
            if line.lower().startswith(b"content-length:")
        )
        while len(buffer) < length:
            chunk = sock.recv(1 << 20)
            assert chunk, ("the connection closed mid-answer", found, head)
            buffer += chunk
        # Without the date (the paths' answers may be a second apart).
        kept = [line.lower() for line in lines[1:] if not line.lower().startswith(b"date:")]
        found.append(b"\r\n".join([lines[0], *kept]) + b"\r\n\r\n" + buffer[:length])
        buffer = buffer[length:]
    return found


def _answer(sock: socket.socket) -> bytes:
    return _answers(sock, 1)[0]


def _count(server, name: str) -> float:
    with server.client() as client:
        return sum(series(parse(client.get("/metrics").text), name).values())


def _in_use(server) -> list[float]:
    with server.client() as client:
        samples = series(parse(client.get("/metrics").text), "etrt_arena_bytes")
    return [v for labels, v in samples.items() if dict(labels)["state"] == "in_use"]


def _settled(server, want, name: str) -> float:
    """The fronts report every half second: waits until `want(value)` or 10 s."""
    deadline = time.monotonic() + 10
    while not want(value := _count(server, name)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return value


def _every_front_native(server, raw: bytes, expected: bytes) -> None:
    """Each front's native path serves once its link to the engine has a model table: `raw`
    whole on new connections until every front has answered one natively (each `expected`)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with server.client() as client:
            per_front = series(
                parse(client.get("/metrics").text), "etrt_front_native_requests_total"
            )
        if len(per_front) == 2 and all(per_front.values()):
            return
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(raw)
            assert _answer(sock) == expected
        time.sleep(0.1)


def test_a_body_in_pieces_is_answered_natively_with_the_python_paths_bytes(server):
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    raw, payload = _raw(x)
    python_raw, _ = _raw(x, "?path=python")
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(python_raw)
        expected = _answer(sock)
    assert expected.startswith(b"HTTP/1.1 200 "), expected[:300]
    assert np.allclose(np.frombuffer(expected[-x.nbytes :], np.float32), x.ravel() * 2 + 1)
    _every_front_native(server, raw, expected)
    before = _count(server, "etrt_front_native_requests_total")
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(raw)
        whole = _answer(sock)
        # The same connection: the head and JSON header with a few tensor bytes, then the rest
        # in pieces, slowly.
        sock.sendall(raw[: payload + 1000])
        time.sleep(0.05)
        for start in range(payload + 1000, len(raw), 150_000):
            sock.sendall(raw[start : start + 150_000])
            time.sleep(0.02)
        pieces = _answer(sock)
    assert whole == expected and pieces == expected
    assert _settled(server, lambda v: v >= before + 2, "etrt_front_native_requests_total") >= (
        before + 2
    )


def _head_then_body(sock: socket.socket, raw: bytes) -> bytes:
    """`raw` as h11's clients (httpx, KServe's REST client) send it: the head in one write,
    the body in another a moment later (here after the head surely arrived alone)."""
    end = raw.index(b"\r\n\r\n") + 4
    sock.sendall(raw[:end])
    time.sleep(0.05)
    sock.sendall(raw[end:])
    return _answer(sock)


def test_a_head_arriving_alone_is_held_for_its_body_and_answered_natively(
    server,
    linear_relu_program,  # noqa: F811
):
    """A JSON body and an image-sized binary one, each sent after its head in a write of its own:
    the native path takes both once the body's first bytes come (it was offered the head alone
    before, declined, and uvicorn read it); the answers are the Python path's bytes."""
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    raw, _ = _raw(x)
    python_raw, _ = _raw(x, "?path=python")
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
    small = linear_relu_program.example_inputs[0].numpy()
    tensor = {"name": "input_0", "shape": list(small.shape), "datatype": "FP32"}
    body = json.dumps({"inputs": [{**tensor, "data": small.ravel().tolist()}]}).encode()

    def json_raw(query: str = "") -> bytes:
        return (
            f"POST /v2/models/lin/infer{query} HTTP/1.1\r\nhost: t\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode() + body

    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(python_raw)
        expected = _answer(sock)
        sock.sendall(json_raw("?path=python"))
        expected_json = _answer(sock)
    assert expected.startswith(b"HTTP/1.1 200 ") and expected_json.startswith(b"HTTP/1.1 200 ")
    _every_front_native(server, raw, expected)
    for _ in range(4):  # each front learns the new model's table from a first request
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(json_raw())
            assert _answer(sock) == expected_json
    time.sleep(1.5)  # the fronts report their counts every half second
    before = _count(server, "etrt_front_native_requests_total")
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        for _ in range(3):
            assert _head_then_body(sock, raw) == expected
            assert _head_then_body(sock, json_raw()) == expected_json
    assert _settled(server, lambda v: v >= before + 6, "etrt_front_native_requests_total") >= (
        before + 6
    )


def test_a_held_head_whose_body_never_comes_is_answered_408(server):
    x = np.zeros((1, 3, 224, 224), np.float32)
    raw, _ = _raw(x)
    end = raw.index(b"\r\n\r\n") + 4
    with socket.create_connection(("127.0.0.1", server.port), timeout=BODY_TIMEOUT_S + 10) as sock:
        sock.sendall(raw[:end])
        begun = time.monotonic()
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
    assert BODY_TIMEOUT_S - 0.5 <= time.monotonic() - begun <= BODY_TIMEOUT_S + 5
    # A head that asks `Expect: 100-continue` is not held: its client waits for the interim
    # answer before it sends the body.
    expecting = raw[: end - 2] + b"expect: 100-continue\r\n\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(expecting)
        interim = sock.recv(4096)
        assert interim.startswith(b"HTTP/1.1 100 "), interim[:200]
        sock.sendall(raw[end:])
        assert _answer(sock).startswith(b"HTTP/1.1 200 ")


def test_a_client_leaving_or_stalling_mid_body_holds_no_slot(server):
    x = np.zeros((1, 3, 224, 224), np.float32)
    raw, payload = _raw(x)
    for _ in range(4):  # gone mid-body
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(raw[: payload + 200_000])
    stalled = socket.create_connection(("127.0.0.1", server.port), timeout=BODY_TIMEOUT_S + 10)
    stalled.sendall(raw[: payload + 200_000])
    begun = time.monotonic()
    answer = b""
    while chunk := stalled.recv(65536):
        answer += chunk
    stalled.close()
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
    assert BODY_TIMEOUT_S - 0.5 <= time.monotonic() - begun <= BODY_TIMEOUT_S + 5
    deadline = time.monotonic() + 10
    while any(_in_use(server)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _in_use(server) and not any(_in_use(server)), _in_use(server)
    # and the server still serves the same request whole
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(raw)
        assert _answer(sock).startswith(b"HTTP/1.1 200 ")


def test_large_answers_of_several_outputs_are_the_python_paths_bytes(server):
    """Answers of 1.2 MB (two image-sized outputs as binary data) and mixed ones (binary and
    JSON outputs, one output not asked for), written natively from the arena slot to the socket;
    and requests sent back to back on one connection, read only once all were sent (the first
    answer's rest waits in the transport: those after it go behind it, whichever path writes
    them), answered alike and in order."""
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    asked = [
        {"output_0": True, "output_1": True, "output_2": True},
        {"output_0": True, "output_1": True, "output_2": False},
        {"output_2": False, "output_1": True},
    ]
    expected, native = [], []
    for outputs in asked:
        python_raw, _ = _raw(x, "?path=python", "three", outputs)
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(python_raw)
            expected.append(_answer(sock))
        native.append(_raw(x, "", "three", outputs)[0])
    assert all(answer.startswith(b"HTTP/1.1 200 ") for answer in expected), expected[0][:300]
    corner = x[:, :, :2, :3] * 3  # output_2, last, after the two images
    images = expected[0][-2 * x.nbytes - corner.nbytes : -corner.nbytes]
    assert np.array_equal(np.frombuffer(images[: x.nbytes], np.float32), x.ravel() * 2 + 1)
    assert np.array_equal(np.frombuffer(images[x.nbytes :], np.float32), x.ravel() - 0.5)
    assert expected[0].endswith(corner.tobytes())
    assert b'"name":"output_2","datatype":"FP32","shape":[1,3,2,3],"data":[' in expected[1]
    _every_front_native(server, native[0], expected[0])
    before = _count(server, "etrt_front_native_requests_total")
    for raw, want in zip(native, expected):
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(raw)
            assert _answer(sock) == want
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        sender = threading.Thread(target=sock.sendall, args=(b"".join(native),))
        sender.start()
        time.sleep(0.5)  # the answers pile up in the server's socket before they are read
        answers = _answers(sock, len(native))
        sender.join()
    assert answers == expected
    want = before + len(native) + 1
    assert _settled(server, lambda v: v >= want, "etrt_front_native_requests_total") >= want
