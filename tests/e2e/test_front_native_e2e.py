"""The fronts' native path (service/front/native_path.py, runtime_ext/front/) through real
server processes: a request sent whole is answered by it, the same request sent in two parts
(which it never takes: uvicorn's parser gets it) by the Python path, and the two answers are the
same bytes, errors included; the front's count says the native path answered the first kind."""

import json
import socket
import time

import numpy as np
import pytest

from support.program_fixtures import dynamic_lookup_program, linear_relu_program  # noqa: F401
from support.prometheus import parse, series
from support.server import upload

FRONTS = 2


def _request(path: str, body: bytes, headers: dict | None = None) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n"
    for name, value in (headers or {}).items():
        head += f"{name}: {value}\r\n"
    return head.encode() + b"\r\n" + body


def _answers(sock: socket.socket, count: int) -> list[bytes]:
    """`count` whole answers off the connection, each without its date line."""
    buffer, found = b"", []
    while len(found) < count:
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            assert chunk, "the connection closed"
            buffer += chunk
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = int(
            next(
                v
                for k, _, v in (line.partition(b": ") for line in lines)
                if k.lower() == b"content-length"
            )
        )  # noqa: E501
        while len(buffer) < length:
            buffer += sock.recv(65536)
        kept = [line for line in lines if not line.lower().startswith(b"date:")]
        found.append(b"\r\n".join(kept) + b"\r\n\r\n" + buffer[:length])
        buffer = buffer[length:]
    return found


def _send(server, raw: bytes, split: bool) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        if split:  # a head cut short: the native path waits for nothing and declines it
            sock.sendall(raw[:25])
            time.sleep(0.05)
            sock.sendall(raw[25:])
        else:
            sock.sendall(raw)
        return _answers(sock, 1)[0]


def _native_count(server) -> float:
    with server.client() as client:
        found = series(parse(client.get("/metrics").text), "etrt_front_native_requests_total")
    return sum(found.values())


@pytest.fixture(scope="module")
def served(tmp_path_factory, linear_relu_program, dynamic_lookup_program):  # noqa: F811
    from support.server import ServerProcess

    server = ServerProcess(
        tmp_path_factory.mktemp("native") / "artifacts", "--workers", str(FRONTS)
    ).start()
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
        assert upload(client, "lookup", dynamic_lookup_program.pte).status_code == 201
    yield server, linear_relu_program.example_inputs[0].numpy()
    server.stop()


def _cases(x: np.ndarray) -> dict[str, bytes]:
    data = x.ravel().tolist()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "input_0",
                    "datatype": "FP32",
                    "shape": list(x.shape),
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],  # noqa: E501
            "outputs": [{"name": "output_0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    v2 = {
        "id": "q7",
        "inputs": [{"name": "input_0", "shape": list(x.shape), "datatype": "FP32", "data": data}],
    }  # noqa: E501
    return {
        "native JSON": _request(
            "/infer",
            json.dumps(
                {
                    "model": "lin",
                    "inputs": [{"shape": list(x.shape), "datatype": "FP32", "data": data}],
                }
            ).encode(),
        ),  # noqa: E501
        "v2 JSON": _request("/v2/models/lin/infer", json.dumps(v2).encode()),
        "v2 JSON, a version": _request("/v2/models/lin/versions/1/infer", json.dumps(v2).encode()),
        "v2 binary": _request(
            "/v2/models/lin/infer",
            header + x.tobytes(),
            {"Inference-Header-Content-Length": len(header)},
        ),  # noqa: E501
        "int64, the lookup": _request(
            "/infer",
            json.dumps(
                {
                    "model": "lookup",
                    "inputs": [{"shape": [1, 3], "datatype": "INT64", "data": [1, 2, 9]}],
                }
            ).encode(),
        ),  # noqa: E501
        "connection: close": _request(
            "/infer",
            json.dumps(
                {
                    "model": "lin",
                    "inputs": [{"shape": list(x.shape), "datatype": "FP32", "data": data}],
                }
            ).encode(),
            {"Connection": "close"},
        ),  # noqa: E501
    }


def _refused(x: np.ndarray) -> dict[str, bytes]:
    data = x.ravel().tolist()
    return {
        # Read by the native path and sent: the engine's execute refuses it (an id past the
        # table), and the error answer is the protocol's own.
        "an execute refusing the inputs": _request(
            "/infer",
            json.dumps(
                {
                    "model": "lookup",
                    "inputs": [{"shape": [1, 2], "datatype": "INT64", "data": [1, 99]}],
                }
            ).encode(),
        ),  # noqa: E501
        "the same over v2": _request(
            "/v2/models/lookup/infer",
            json.dumps(
                {
                    "inputs": [
                        {"name": "input_0", "shape": [1, 2], "datatype": "INT64", "data": [1, 99]}
                    ]
                }
            ).encode(),
        ),  # noqa: E501
        # Declined by it: the Python path answers both ways.
        "a wrong shape": _request(
            "/infer",
            json.dumps(
                {"model": "lin", "inputs": [{"shape": [9], "datatype": "FP32", "data": [0] * 9}]}
            ).encode(),
        ),  # noqa: E501
        "an unknown model": _request(
            "/v2/models/nope/infer",
            json.dumps(
                {
                    "inputs": [
                        {
                            "name": "input_0",
                            "shape": list(x.shape),
                            "datatype": "FP32",
                            "data": data,
                        }
                    ]
                }
            ).encode(),
        ),  # noqa: E501
        "not JSON": _request("/infer", b'{"model": "lin", "inputs": ['),
    }


def test_answers_are_the_same_bytes_whichever_path_made_them(served):
    server, x = served
    for case, raw in {**_cases(x), **_refused(x)}.items():
        first = _send(server, raw, split=False)  # warms up too: the lane serves known methods
        whole, parts = _send(server, raw, split=False), _send(server, raw, split=True)
        assert whole == parts, (case, whole[:600], parts[:600])
        assert whole.split(b" ")[1] == first.split(b" ")[1], case
    status = {case: _send(server, raw, False).split(b" ")[1] for case, raw in _refused(x).items()}
    assert status == {
        "an execute refusing the inputs": b"422",
        "the same over v2": b"400",
        "a wrong shape": b"422",
        "an unknown model": b"404",
        "not JSON": b"422",
    }


def test_the_native_path_answers_whole_requests_and_keeps_a_connections_order(served):
    server, x = served
    cases = _cases(x)
    before = _native_count(server)
    raw = cases["v2 binary"]
    for _ in range(20):
        _send(server, raw, split=False)
    # Counted by each front and reported every half second.
    deadline = time.monotonic() + 10
    while _native_count(server) < before + 20 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _native_count(server) >= before + 20
    # Pipelined on one connection: a native answer, then a Python one, then a native one, in
    # the order they were sent.
    pipelined = [cases["native JSON"], _refused(x)["a wrong shape"], cases["v2 JSON"]]
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"".join(pipelined))
        answers = _answers(sock, 3)
    assert [a.split(b" ")[1] for a in answers] == [b"200", b"422", b"200"]
    assert b'"model":"lin"' in answers[0] and b'"model_name":"lin"' in answers[2]
    assert b'"id":"q7"' in answers[2]


def test_a_client_leaving_frees_its_slot_and_connection_close_is_kept(served):
    server, x = served
    raw = _cases(x)["native JSON"]
    for _ in range(10):
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(raw)  # and gone before the answer
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(_cases(x)["connection: close"])
        [answer] = _answers(sock, 1)
        assert b"connection: close" in answer.lower()
        assert sock.recv(1) == b""  # closed after it

    def in_use() -> list:
        with server.client() as client:
            found = series(parse(client.get("/metrics").text), "etrt_arena_bytes")
        return [v for labels, v in found.items() if dict(labels)["state"] == "in_use"]

    deadline = time.monotonic() + 10
    while any(in_use()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert in_use() and not any(in_use())


def _exchange(server, raw: bytes, count: int, split: bool) -> tuple[list[bytes], bool]:
    """(the first `count` answers to `raw`, whether the server closed the connection after)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        if split:  # the native path declines a head cut short: uvicorn's parser reads it all
            sock.sendall(raw[:25])
            time.sleep(0.05)
            sock.sendall(raw[25:])
        else:
            sock.sendall(raw)
        answers = _answers(sock, count)
        sock.settimeout(2)
        try:
            closed = sock.recv(1) == b""
        except TimeoutError:
            closed = False
    return answers, closed


def test_framing_is_answered_alike_by_both_paths(served):
    """Bytes after a whole request, pipelining and a request cut short, sent in one piece (the
    native path reads the first request) and with the head cut short (uvicorn's parser reads
    everything): the same answers, in the same order, and the connection closed alike. A whole
    request followed by bytes that are no request is answered (RFC 9112: each request gets its
    answer, in order), then the bytes get a 400 and the connection closes; the Python path used
    to answer only the 400, dropping the answer of a request that had run."""
    server, x = served
    cases = _cases(x)
    whole = cases["native JSON"]
    framings = {
        "garbage after": (whole + b"GARBAGE\r\n\r\n", [b"200", b"400"], True),
        "a stray CRLF and garbage": (whole + b"\r\nx", [b"200", b"400"], True),
        "pipelined": (whole + cases["v2 binary"], [b"200", b"200"], False),
        "pipelined, then garbage": (
            whole + cases["v2 JSON"] + b"\x00\xff",
            [b"200"] * 2 + [b"400"],
            True,
        ),
        "connection: close, then garbage": (cases["connection: close"] + b"x", [b"200"], True),
    }
    for name, (raw, statuses, closes) in framings.items():
        got = {split: _exchange(server, raw, len(statuses), split) for split in (False, True)}
        for split, (answers, closed) in got.items():
            assert [a.split(b" ")[1] for a in answers] == statuses, (name, split, answers)
            assert closed == closes, (name, split)
        assert got[False][0] == got[True][0], (name, got)
    # A request cut short and left: nothing is answered on either path, nothing is held.
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(whole[:-5])
        sock.settimeout(1)
        with pytest.raises(TimeoutError):
            sock.recv(1)


def test_an_idle_connection_closes_after_the_keep_alive_timeout_whichever_path_answered(served):
    """uvicorn's keep-alive timeout (5 s) holds for connections the native path answers too,
    kept by the transport's read clock instead of a timer per request: a connection idle that
    long after a native answer closes, whichever path answered it, and one that keeps sending
    requests more often than that stays open past it (each answer moves its deadline), even
    when its first answer was the Python path's (uvicorn's own timer is cancelled)."""
    server, x = served
    native, python = _cases(x)["native JSON"], _refused(x)["a wrong shape"]
    before = _native_count(server)
    busy = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    idle = {
        path: socket.create_connection(("127.0.0.1", server.port), timeout=30)
        for path in ("native", "python", "python then native")
    }
    try:
        idle["native"].sendall(native)
        idle["python"].sendall(python)
        idle["python then native"].sendall(python)
        idle["python then native"].recv(65536)  # uvicorn armed its own timer after this one
        idle["python then native"].sendall(native)
        assert [_answers(idle[p], 1)[0].split(b" ")[1] for p in idle] == [b"200", b"422", b"200"]
        busy.sendall(python)  # uvicorn's timer, armed after it, must not close it later
        assert _answers(busy, 1)[0].split(b" ")[1] == b"422"
        began = time.monotonic()
        while time.monotonic() - began < 7:  # past the 5 s timeout, one request a second
            busy.sendall(native)
            assert _answers(busy, 1)[0].split(b" ")[1] == b"200"
            time.sleep(1)
        for path, sock in idle.items():  # closed by the server: the end of the stream
            sock.settimeout(5)
            assert sock.recv(1) == b"", path
        busy.sendall(native)  # still open
        assert _answers(busy, 1)[0].split(b" ")[1] == b"200"
    finally:
        busy.close()
        for sock in idle.values():
            sock.close()
    deadline = time.monotonic() + 10
    while _native_count(server) < before + 9 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _native_count(server) >= before + 9  # the natively answered ones were native
