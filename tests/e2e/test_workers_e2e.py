"""The server as several protocol fronts over one engine process: one server to every client,
faults that stay small, nothing left running."""

import json
import os
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from support import programs
from support.processes import children, role_pids
from support.program_fixtures import dynamic_batch_program, linear_relu_program  # noqa: F401
from support.prometheus import parse, series, value
from support.server import tensor, upload

FRONTS = 2


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def metrics(server) -> dict:
    with server.client() as client:
        return parse(client.get("/metrics").text)


def wait_for(condition, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached within {timeout} s")


def arenas_empty(server) -> bool:
    """Every front reports no shared memory in use (they report every half second)."""
    in_use = [
        v
        for labels, v in series(metrics(server), "etrt_arena_bytes").items()
        if dict(labels)["state"] == "in_use"
    ]
    return bool(in_use) and not any(in_use)


def fresh_infer(server, model: str, x) -> httpx.Response:
    """One request over a connection of its own, so the kernel may give it to any front."""
    with httpx.Client(base_url=server.url, timeout=60) as client:
        return client.post("/infer", json={"model": model, "inputs": [tensor(x)]})


def fronts_served(server) -> dict:
    return {
        dict(labels)["front"]: count
        for labels, count in series(metrics(server), "etrt_front_requests_total").items()
    }


def _read_answers(sock: socket.socket, count: int) -> list[tuple[int, bytes]]:
    """(status, body) of `count` HTTP/1.1 answers read off one connection, in order."""
    buffer, answers = b"", []
    while len(answers) < count:
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            assert chunk, f"the connection closed after {len(answers)} answers"
            buffer += chunk
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        length = next(
            int(line.split(":", 1)[1])
            for line in lines
            if line.lower().startswith("content-length")
        )
        while len(buffer) < length:
            buffer += sock.recv(65536)
        answers.append((int(lines[0].split()[1]), buffer[:length]))
        buffer = buffer[length:]
    return answers


@pytest.fixture
def fronted(start_server):
    return start_server("--workers", str(FRONTS))


def test_every_protocol_through_two_fronts_sees_one_server(fronted, linear_relu_program):
    server = fronted
    x = linear_relu_program.example_inputs[0]
    expected = linear_relu_program.module(x).detach().numpy()
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
    # A model uploaded through one front is served by every front, at once. Two at a time: one
    # after another, the front that just answered is awake first and could take every one.
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: fresh_infer(server, "lin", x), range(100)))
    assert [r.status_code for r in answers] == [200] * 100
    for answer in answers[:5]:
        got = np.asarray(answer.json()["outputs"][0]["data"], np.float32)
        assert np.allclose(got.reshape(expected.shape), expected, atol=1e-5)
    served = fronts_served(server)
    assert set(served) == {str(i) for i in range(FRONTS)}, served
    assert sum(served.values()) == 100

    http = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    for binary in (True, False):
        given = httpclient.InferInput("input_0", list(x.shape), "FP32")
        given.set_data_from_numpy(x.numpy(), binary_data=binary)
        result = http.infer(
            "lin", [given], outputs=[httpclient.InferRequestedOutput("output_0", binary)]
        )
        assert np.allclose(result.as_numpy("output_0"), expected, atol=1e-5)
    given = grpcclient.InferInput("input_0", list(x.shape), "FP32")
    given.set_data_from_numpy(x.numpy())
    assert np.allclose(grpc.infer("lin", [given]).as_numpy("output_0"), expected, atol=1e-5)
    assert grpc.is_server_ready() and http.is_model_ready("lin")
    stats = http.get_inference_statistics("lin")["model_stats"][0]
    assert stats["inference_count"] == 100 + 3  # counted once, by the engine, whatever the front
    # Whether the engine ran a request at once or through its queue, it is one execute, one
    # success, one request in /metrics.
    assert stats["execution_count"] == 100 + 3
    assert stats["inference_stats"]["success"]["count"] == 100 + 3
    requests = series(metrics(server), "etrt_inference_requests_total")
    assert sum(n for labels, n in requests.items() if dict(labels)["model"] == "lin") == 100 + 3
    with server.client() as client:
        assert client.get("/health/ready").status_code == 200
        assert client.get("/v2/health/ready").status_code == 200
        assert client.get("/docs").status_code == 200
        assert client.get("/models/lin").json()["state"] == "ready"
        assert client.delete("/models/lin").status_code == 204
    gone = [fresh_infer(server, "lin", x).status_code for _ in range(20)]
    assert gone == [404] * 20
    # Nothing of those requests is left in any arena.
    wait_for(lambda: arenas_empty(server), what="arenas empty")


def _lane_served(server, model: str) -> float:
    found = series(metrics(server), "etrt_engine_lane_requests_total")
    return sum(n for labels, n in found.items() if dict(labels)["model"] == model)


@pytest.mark.parametrize("access_log", [False, True])
def test_small_requests_are_served_by_the_engines_lane_unless_every_request_is_logged(
    start_server, linear_relu_program, access_log
):
    """The engine's native lane (runtime_ext/lane/) answers a small request to a directly
    scheduled method on the thread that read it, without the engine's Python; the answers and
    counts are the same either way. With an access log, every request takes the engine's loop,
    which writes the lines."""
    server = start_server("--workers", str(FRONTS), *(["--access-log"] if access_log else []))
    x = linear_relu_program.example_inputs[0]
    expected = linear_relu_program.module(x).detach().numpy()
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
    http = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda _: fresh_infer(server, "lin", x), range(60)))
    for binary in (True, False):  # v2 binary and JSON answers, from the lane's room too
        given = httpclient.InferInput("input_0", list(x.shape), "FP32")
        given.set_data_from_numpy(x.numpy(), binary_data=binary)
        result = http.infer(
            "lin", [given], outputs=[httpclient.InferRequestedOutput("output_0", binary)]
        )
        assert np.allclose(result.as_numpy("output_0"), expected, atol=1e-5)
    assert [r.status_code for r in answers] == [200] * 60
    for answer in answers:
        got = np.asarray(answer.json()["outputs"][0]["data"], np.float32)
        assert np.allclose(got.reshape(expected.shape), expected, atol=1e-5)
    stats = http.get_inference_statistics("lin")["model_stats"][0]
    assert stats["inference_count"] == stats["execution_count"] == 62
    assert sum(fronts_served(server).values()) == 62
    lane = _lane_served(server, "lin")
    if access_log:
        assert lane == 0
    else:
        # The first execute of a method is measured on the loop (the lane serves methods known
        # to be short); under 60 requests from 4 clients a few more may find an instance busy.
        assert 40 <= lane <= 61, lane
    wait_for(lambda: arenas_empty(server), what="arenas empty")


def test_dynamic_batching_merges_requests_from_different_fronts(fronted, dynamic_batch_program):
    server = fronted
    config = {
        "max_batch_size": 8,
        "dynamic_batching": {"max_queue_delay_microseconds": 200_000},
        "instance_group": [{"count": 1}],
    }
    with server.client() as client:
        created = upload(
            client, "b", dynamic_batch_program.pte, fields={"config": json.dumps(config)}
        )
        assert created.status_code == 201, created.text
    every_front = {str(i) for i in range(FRONTS)}
    shape = dynamic_batch_program.example_inputs[0].shape[1:]

    def one_round() -> None:
        """16 requests at once, each on a fresh connection, answered right."""
        rows = [torch.randn(1, *shape) for _ in range(16)]
        with ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda row: fresh_infer(server, "b", row), rows))
        assert [r.status_code for r in results] == [200] * 16
        for row, result in zip(rows, results):
            expected = dynamic_batch_program.module(row).detach().numpy()
            got = np.asarray(result.json()["outputs"][0]["data"], np.float32)
            assert np.allclose(got.reshape(expected.shape), expected, atol=1e-5)

    # Rounds until both fronts have sent some: the kernel hands each connection to whichever
    # front wakes first, and a quick front can take a whole round before the other wakes.
    rounds = 0
    while rounds < 5 and (rounds == 0 or set(fronts_served(server)) != every_front):
        one_round()
        rounds += 1
    assert set(fronts_served(server)) == every_front
    with server.client() as client:
        stats = client.get("/v2/models/b/stats").json()["model_stats"][0]
    assert stats["inference_count"] == 16 * rounds
    batches = value(metrics(server), "etrt_batch_size_count", model="b", method="forward")
    assert batches < 16 * rounds, batches  # merged


def test_an_engine_killed_under_load_costs_only_503s_then_serves_again(
    fronted, linear_relu_program
):
    server = fronted
    x = linear_relu_program.example_inputs[0]
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
    (engine,) = role_pids(server, "engine")
    codes, stop = [], threading.Event()

    def load():
        with server.client(timeout=30) as client:
            while not stop.is_set():
                try:
                    body = {"model": "lin", "inputs": [tensor(x)]}
                    codes.append(client.post("/infer", json=body).status_code)
                except httpx.TransportError as exc:  # never: the fronts stay up
                    codes.append(repr(exc))

    threads = [threading.Thread(target=load) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    os.kill(engine, signal.SIGKILL)
    wait_for(lambda: role_pids(server, "engine") not in ([], [engine]), what="a new engine")
    wait_for(lambda: fresh_infer(server, "lin", x).status_code == 200, what="serving again")
    time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join()
    assert set(codes) <= {200, 503}, sorted({str(c) for c in codes})
    assert 503 in codes and codes[-1] == 200
    with server.client() as client:
        assert [m["name"] for m in client.get("/models").json()] == ["lin"]
        down = client.get("/health/ready")
        assert down.status_code == 200
    assert "inference engine is restarting" in server.log() or 503 in codes


def test_a_killed_front_leaves_the_port_answering(fronted, linear_relu_program):
    server = fronted
    x = linear_relu_program.example_inputs[0]
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
    victim = role_pids(server, "front")[0]
    os.kill(victim, signal.SIGKILL)
    codes = [fresh_infer(server, "lin", x).status_code for _ in range(50)]
    assert codes == [200] * 50
    wait_for(lambda: len(role_pids(server, "front")) == FRONTS, what="the front restarted")


def test_sigterm_stops_every_process_of_the_server(fronted, linear_relu_program):
    server = fronted
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
        # A large JSON body starts the decoding worker processes of the front that takes it.
        big = np.zeros((1, 4), np.float32)
        body = {"model": "lin", "inputs": [tensor(big)], "pad": "x" * (400 * 1024)}
        client.post("/infer", json=body)
    processes = children(server.process.pid)
    assert len(processes) >= FRONTS + 1
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(60) == 0
    wait_for(lambda: not any(alive(pid) for pid in processes), 30, "every child gone")
    # The engine freed its programs before it ended: the native extension reports none leaked
    # (its accept thread held the service alive past the interpreter's end).
    assert "leaked" not in server.log(), server.log()[-2000:]


def test_a_supervisor_killed_outright_takes_every_process_along(fronted, linear_relu_program):
    server = fronted
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
        big = np.zeros((1, 4), np.float32)
        body = {"model": "lin", "inputs": [tensor(big)], "pad": "x" * (400 * 1024)}
        client.post("/infer", json=body)  # starts a front's JSON decoding workers
    processes = children(server.process.pid)
    assert len(processes) > FRONTS + 1, processes  # the workers of one front at least
    server.process.kill()
    server.process.wait(10)
    wait_for(lambda: not any(alive(pid) for pid in processes), 15, "every child gone")
    # The store is intact: the next server on it serves the model.
    server.start()
    with server.client() as client:
        assert client.get("/models/lin").json()["state"] == "ready"


def test_hostile_and_oversized_bodies_leave_nothing_in_the_arenas(
    start_server, linear_relu_program
):
    server = start_server("--workers", str(FRONTS), "--arena-bytes", str(1 << 20))
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
        v2 = "/v2/models/lin/infer"
        header = json.dumps(
            {
                "inputs": [
                    {
                        "name": "input_0",
                        "datatype": "FP32",
                        "shape": [2, 4],
                        "parameters": {"binary_data_size": 32},
                    }
                ]
            }
        ).encode()
        cases = [
            # larger than the whole arena: 413 naming the setting
            (header + b"\0" * (2 << 20), {"Inference-Header-Content-Length": str(len(header))}),
            # shorter than its binary_data_size
            (header + b"\0" * 8, {"Inference-Header-Content-Length": str(len(header))}),
            # a header length past the body
            (header + b"\0" * 32, {"Inference-Header-Content-Length": "99999"}),
            (b"{not json" + b"\0" * 32, {"Inference-Header-Content-Length": "9"}),
        ]
        for body, headers in cases:
            response = client.post(v2, content=body, headers=headers)
            assert 400 <= response.status_code < 500, (response.status_code, response.text)
            assert response.json()["error"]
        too_big = client.post(v2, content=cases[0][0], headers=cases[0][1])
        assert too_big.status_code == 413 and "--arena-bytes" in too_big.json()["error"]
    wait_for(lambda: arenas_empty(server), what="arenas empty")


def _rss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("RssAnon:", "RssShmem:")):
                total += int(line.split()[1])
    return total


def test_idle_connections_declaring_huge_bodies_hold_no_memory(fronted, linear_relu_program):
    server = fronted
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
    pids = role_pids(server, "front") + role_pids(server, "engine")
    before = _rss_kib(pids)
    idle = []
    for _ in range(8):  # each declares a 256 MiB body and sends 110 bytes of a longer header
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(
            b"POST /v2/models/lin/infer HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/octet-stream\r\nInference-Header-Content-Length: 4096\r\n"
            b"Content-Length: 268434432\r\n\r\n" + b"{" + b" " * 109
        )
        idle.append(sock)
    time.sleep(1.0)
    try:
        grown_mib = (_rss_kib(pids) - before) / 1024
        assert grown_mib < 64, grown_mib
        # None of them was refused for want of shared memory: none holds any yet.
        for sock in idle:
            sock.settimeout(0.05)
            with pytest.raises(TimeoutError):
                sock.recv(1)
        # The arenas are free for everyone else meanwhile.
        http = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
        x = linear_relu_program.example_inputs[0].numpy()
        given = httpclient.InferInput("input_0", list(x.shape), "FP32")
        given.set_data_from_numpy(x, binary_data=True)
        for _ in range(10):
            assert http.infer("lin", [given]).as_numpy("output_0").shape == (2, 3)
    finally:
        for sock in idle:
            sock.close()


def test_pipelined_requests_on_one_connection_are_answered_in_their_order(
    fronted, linear_relu_program
):
    """Small inference requests are answered by the fronts' native path, the rest through the
    app (service/front/protocols/front_lane.py): sent at once, all come back, each in its place."""
    server = fronted
    x = linear_relu_program.example_inputs[0].numpy()
    expected = linear_relu_program.module(torch.from_numpy(x)).detach().numpy()
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
        assert client.post("/infer", json={"model": "lin", "inputs": [tensor(x)]}).is_success
    v2_input = {"name": "input_0", "datatype": "FP32", "shape": list(x.shape)}
    header = json.dumps(
        {
            "inputs": [{**v2_input, "parameters": {"binary_data_size": x.nbytes}}],
            "outputs": [{"name": "output_0", "parameters": {"binary_data": True}}],
        }
    ).encode()

    def post(path: str, body: bytes, *headers: str) -> bytes:
        lines = [f"POST {path} HTTP/1.1", "Host: t", f"Content-Length: {len(body)}", *headers]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    native = json.dumps({"model": "lin", "inputs": [tensor(x)]}).encode()
    v2_json = json.dumps({"inputs": [{**v2_input, "data": x.ravel().tolist()}]}).encode()
    wrong = json.dumps({"model": "lin", "inputs": [tensor(np.ones((3, 3), np.float32))]})
    binary = f"Inference-Header-Content-Length: {len(header)}"
    requests = [
        post("/infer", native),
        post("/v2/models/lin/infer", v2_json),
        post("/infer", native.replace(b'"lin"', b'"nope"')),
        post("/v2/models/lin/infer", header + x.tobytes(), binary),
        post("/infer", wrong.encode()),
        b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n\r\n",
        post("/infer", native),
    ]
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        for _ in range(3):
            sock.sendall(b"".join(requests))
            answers = _read_answers(sock, len(requests))
            assert [status for status, _ in answers] == [200, 200, 404, 200, 422, 200, 200]
            for at in (0, 6):
                got = json.loads(answers[at][1])["outputs"][0]["data"]
                assert np.allclose(np.reshape(got, expected.shape), expected, atol=1e-5)
            assert np.allclose(
                np.reshape(json.loads(answers[1][1])["outputs"][0]["data"], expected.shape),
                expected,
                atol=1e-5,
            )
            raw = answers[3][1]
            head_length = len(raw) - expected.nbytes
            assert json.loads(raw[:head_length])["outputs"][0]["parameters"] == {
                "binary_data_size": expected.nbytes
            }
            assert np.allclose(np.frombuffer(raw[head_length:], np.float32), expected.ravel())
            assert "not found" in json.loads(answers[2][1])["error"]
            assert "shape" in json.loads(answers[4][1])["error"]
    wait_for(lambda: arenas_empty(server), what="arenas empty")


def test_outputs_written_by_worker_threads_land_in_each_requests_own_room(fronted, programs_dir):
    """A long execute runs in a worker thread, which writes its output straight into the room
    its front reserved (service/engine/outputs.py). Requests in flight at once through both
    fronts each get their own output; one whose client leaves mid-execute frees its room only
    once the thread is done with it, and nothing is left in the arenas."""
    server = fronted
    heavy = programs.export_cpu_heavy(programs_dir, rounds=100, size=20_000)
    config = json.dumps({"instance_group": [{"count": 4}]})
    with server.client() as client:
        assert upload(client, "heavy", heavy.pte, fields={"config": config}).status_code == 201
    inputs = [torch.randn(20_000) for _ in range(16)]
    expected = [heavy.module(x).detach().numpy() for x in inputs]
    body = json.dumps({"model": "heavy", "inputs": [tensor(inputs[0])]}).encode()
    leaving = [
        f"POST /infer HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    ] * 4

    def leave(request: bytes) -> None:  # sent, then gone while its execute runs
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(request)
            time.sleep(0.005)

    with ThreadPoolExecutor(8) as pool:
        gone = [pool.submit(leave, request) for request in leaving]
        answers = list(pool.map(lambda x: fresh_infer(server, "heavy", x), inputs))
        for future in gone:
            future.result()
    assert [r.status_code for r in answers] == [200] * len(inputs)
    for answer, want in zip(answers, expected):
        got = np.asarray(answer.json()["outputs"][0]["data"], np.float32)
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=1e-5)
    wait_for(lambda: arenas_empty(server), what="arenas empty")
