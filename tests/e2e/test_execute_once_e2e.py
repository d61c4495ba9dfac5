"""A request is executed once, whichever way it goes (issue 36): through real server processes,
a program that counts the rows it executes in a mutable buffer (programs.export_counter) is
driven through every path a request can take (the fronts' native path and the engine's lane,
inline and on the lane's workers; uvicorn's parser and the ASGI route; the engine's Python for a
request with parameters; dynamic batching; an execute that fails after it counted; outputs that
do not fit the room a front reserves), and the count equals the rows sent. An execute that
failed in the lane is answered with the body the Python path writes for the same failure."""

import json
import socket
import threading
import time

import pytest

from support.program_fixtures import counter_program, wide_counter_program  # noqa: F401
from support.prometheus import parse, series
from support.server import ServerProcess, upload

ONE_INSTANCE = {"instance_group": [{"count": 1}]}  # one instance: one counter
BAD_ID = 9  # past the table: the execute fails after it counted


def _raw(path: str, body: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def _send(server, raw: bytes, split: bool) -> tuple[int, bytes]:
    """(status, body) of one request; `split`: its head sent in two parts, which the native
    path never takes (uvicorn's parser and the ASGI route serve it)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        if split:
            sock.sendall(raw[:25])
            time.sleep(0.05)
            sock.sendall(raw[25:])
        else:
            sock.sendall(raw)
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            assert chunk, "the connection closed"
            buffer += chunk
        head, _, body = buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in lines
            if line.lower().startswith(b"content-length")
        )
        while len(body) < length:
            body += sock.recv(65536)
        return int(lines[0].split()[1]), body


def _native(model: str, ids: list[int]) -> bytes:
    body = {"model": model, "inputs": [{"shape": [len(ids)], "datatype": "INT64", "data": ids}]}
    return _raw("/infer", json.dumps(body).encode())


def _v2(model: str, ids: list[int], parameters: dict | None = None) -> bytes:
    body = {"inputs": [{"name": "input_0", "shape": [len(ids)], "datatype": "INT64", "data": ids}]}
    if parameters:
        body["parameters"] = parameters
    return _raw(f"/v2/models/{model}/infer", json.dumps(body).encode())


def _count(server, model: str) -> int:
    """Executes one more row and answers the rows counted so far, that one included."""
    status, body = _send(server, _native(model, [0]), split=False)
    assert status == 200, body
    [counts] = [o["data"] for o in json.loads(body)["outputs"] if o["datatype"] == "INT64"]
    return counts[0]


def _lane_served(server, model: str) -> float:
    with server.client() as client:
        found = series(parse(client.get("/metrics").text), "etrt_engine_lane_requests_total")
    return sum(n for labels, n in found.items() if dict(labels)["model"] == model)


def _serve(tmp_path_factory, programs: dict, *args: str) -> ServerProcess:
    root = tmp_path_factory.mktemp("once") / "artifacts"
    server = ServerProcess(root, "--workers", "2", *args).start()
    with server.client() as client:
        for name, (program, config) in programs.items():
            fields = {"config": json.dumps(config)}
            assert upload(client, name, program.pte, fields=fields).status_code == 201
    return server


@pytest.fixture(scope="module")
def inline_server(tmp_path_factory, counter_program):  # noqa: F811
    batched = {**ONE_INSTANCE, "max_batch_size": 8, "dynamic_batching": {}}
    programs = {"counter": (counter_program, ONE_INSTANCE), "batched": (counter_program, batched)}
    server = _serve(tmp_path_factory, programs)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def workers_server(tmp_path_factory, counter_program, wide_counter_program):  # noqa: F811
    # Every execute counts as long (on the lane's workers, or Python's threads); an arena whose
    # quarter (a request's room at most) is smaller than the wide program's output bound.
    programs = {
        "counter": (counter_program, ONE_INSTANCE),
        "wide": (wide_counter_program, ONE_INSTANCE),
    }
    server = _serve(
        tmp_path_factory, programs, "--inline-execute-us", "0", "--arena-bytes", str(1 << 20)
    )
    yield server
    server.stop()


def _every_path(server, model: str) -> int:
    """Sends the model's requests every way, checking their answers; the rows sent."""
    rows = 0
    for ids in ([1], [2, 3], [1, 1, 1]):
        for raw, split in (
            (_native(model, ids), False),  # the native path and the engine's lane
            (_v2(model, ids), False),
            (_native(model, ids), True),  # uvicorn's parser, then the engine's lane
            (_v2(model, ids, {"timeout": 60_000_000}), False),  # the engine's Python
        ):
            status, body = _send(server, raw, split)
            assert status == 200, body
            rows += len(ids)
    # An execute that fails after it counted: answered once, the same answer every way (the
    # native protocol's 422 for inputs a kernel rejected, v2's 400).
    for make, code in ((_native, 422), (_v2, 400)):
        answers = set()
        for split in (False, True):
            answers.add(_send(server, make(model, [BAD_ID]), split))
            rows += 1
        if make is _v2:
            answers.add(_send(server, _v2(model, [BAD_ID], {"timeout": 60_000_000}), False))
            rows += 1
        [(status, body)] = answers
        assert status == code and f"{BAD_ID} >= weight.size(0)" in body.decode(), body
    return rows


def test_every_path_executes_a_request_once(inline_server):
    before = _count(inline_server, "counter")
    rows = _every_path(inline_server, "counter")
    assert _count(inline_server, "counter") - before == rows + 1
    assert _lane_served(inline_server, "counter") > 0  # the native lane did serve


def test_batched_requests_execute_once(inline_server):
    before = _count(inline_server, "batched")
    answers, lock = [], threading.Lock()

    def send(ids):
        answer = _send(inline_server, _v2("batched", ids), False)
        with lock:
            answers.append(answer)

    sent = [[i % 4] * (1 + i % 3) for i in range(24)]
    threads = [threading.Thread(target=send, args=(ids,)) for ids in sent]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [status for status, _ in answers] == [200] * len(sent)
    assert _count(inline_server, "batched") - before == sum(map(len, sent)) + 1


def test_on_the_lanes_workers_a_request_executes_once(workers_server):
    before = _count(workers_server, "counter")
    rows = _every_path(workers_server, "counter")
    assert _count(workers_server, "counter") - before == rows + 1
    assert _lane_served(workers_server, "counter") > 0


def test_outputs_larger_than_their_room_execute_once(workers_server):
    """The lane declines these before running them (no room for the output's bound); the
    engine's Python runs them, once, and answers the output all the same."""
    before = _count(workers_server, "wide")
    rows = _every_path(workers_server, "wide")
    assert _count(workers_server, "wide") - before == rows + 1
    assert _lane_served(workers_server, "wide") == 0
