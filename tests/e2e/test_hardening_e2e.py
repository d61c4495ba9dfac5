"""Issue 8 against a real server process: what a clumsy or hostile client does must end in a 4xx in
the one error shape, on a connection that stays usable, with bounded answers and log lines; a
dying server takes its load-check children with it; uploads can be verified by digest.
"""

import base64
import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from support.load_check_faults import spawn_hanging_load_check
from support.program_fixtures import linear_relu_program, mix_of_ops_program  # noqa: F401
from support.prometheus import parse, value
from support.server import ServerProcess, registry_rows, stored_files, tensor, upload

HANG = "support.load_check_faults:hang_in_load_check"


def request(
    connection: http.client.HTTPConnection, method: str, path: str, body=None, headers=None
) -> tuple[int, dict, bytes]:
    """One request on a kept-alive connection; fails if the server closed it under us."""
    payload = json.dumps(body).encode() if body is not None else None
    connection.request(
        method, path, body=payload, headers={"content-type": "application/json", **(headers or {})}
    )
    response = connection.getresponse()
    return response.status, dict(response.getheaders()), response.read()


def keep_alive(server) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)


def assert_error_shape(body: bytes, rule: str | None = None) -> dict:
    parsed = json.loads(body)
    assert set(parsed) == {"error", "problems"}, parsed
    assert isinstance(parsed["error"], str) and isinstance(parsed["problems"], list)
    if rule is not None:
        assert [p["rule"] for p in parsed["problems"]] == [rule], parsed
    return parsed


def test_an_input_the_kernel_refuses_is_a_422_with_executorch_reason(
    shared_server, mix_of_ops_program
):
    with shared_server.client() as client:
        assert upload(client, "mix", mix_of_ops_program.pte).status_code == 201
    x = np.ones((3, 8), np.float32)
    connection = keep_alive(shared_server)
    status, _, body = request(
        connection,
        "POST",
        "/infer",
        {"model": "mix", "inputs": [tensor(x), tensor(np.array([1, 4, 50], np.int64))]},
    )
    socket_before = connection.sock
    assert status == 422, body
    [problem] = assert_error_shape(body, "input.rejected")["problems"]
    # ExecuTorch's own reason: index 50 is past the embedding's 10 rows.
    assert "50 >= weight.size(0) 10" in problem["message"] and "embedding" in problem["message"]
    assert "type id" not in problem["message"]
    assert str(shared_server.artifacts) not in body.decode(), "server paths must not leak"
    status, _, body = request(
        connection,
        "POST",
        "/infer",
        {"model": "mix", "inputs": [tensor(x), tensor(np.array([1, 4, 9], np.int64))]},
    )
    assert status == 200, body
    assert connection.sock is socket_before, "the connection must survive a refused request"
    with shared_server.client() as client:
        metrics = parse(client.get("/metrics").text)
    assert (
        value(
            metrics,
            "etrt_inference_requests_total",
            model="mix",
            method="forward",
            outcome="client_error",
        )
        >= 1
    )
    assert (
        value(
            metrics, "etrt_inference_requests_total", model="mix", method="forward", outcome="error"
        )
        is None
    )


def test_unknown_paths_and_wrong_methods_answer_in_the_error_shape(shared_server):
    connection = keep_alive(shared_server)
    status, _, body = request(connection, "GET", "/no/such/route")
    assert status == 404
    assert "/no/such/route" in assert_error_shape(body, "request.route")["error"]
    status, headers, body = request(connection, "PUT", "/models")
    assert status == 405 and "POST" in headers["allow"]
    assert_error_shape(body, "request.method")
    status, _, body = request(connection, "DELETE", "/infer")
    assert status == 405
    assert_error_shape(body, "request.method")
    status, _, body = request(connection, "POST", "/infer", headers={}, body=None)
    assert status == 422
    assert_error_shape(body)
    status, _, _ = request(connection, "GET", "/health/live")
    assert status == 200


def test_openapi_lists_every_status_of_each_route(shared_server):
    with shared_server.client() as client:
        schema = client.get("/openapi.json").json()
    expected = {
        ("post", "/models"): {"201", "401", "403", "409", "413", "422", "500", "503", "507"},
        ("get", "/models"): {"200", "401", "403", "500"},
        ("get", "/models/{name}"): {"200", "401", "403", "404", "422", "500"},
        ("delete", "/models/{name}"): {"204", "401", "403", "404", "422", "500"},
        ("post", "/infer"): {"200", "401", "403", "404", "413", "422", "500", "503", "504"},
    }
    for (method, path), statuses in expected.items():
        responses = schema["paths"][path][method]["responses"]
        assert set(responses) == statuses, (method, path, sorted(responses))
        for status, response in responses.items():
            if int(status) >= 400:
                assert response["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorBody"
                }, (method, path, status)
    assert "HTTPValidationError" not in json.dumps(schema)


def test_huge_client_strings_are_clipped_in_answers_and_logs(start_server, linear_relu_program):
    server = start_server()
    huge = "m" * 10_000_000
    connection = keep_alive(server)
    status, _, body = request(connection, "POST", "/infer", {"model": huge, "inputs": []})
    assert status == 404 and len(body) < 1000, len(body)
    assert_error_shape(body)
    # A long path is as far as the HTTP parser lets one go (about 16 KiB); it is logged clipped.
    status, _, body = request(connection, "GET", "/models/" + "q" * 12_000)
    assert status == 404 and len(body) < 1000
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
        x = tensor(np.ones((2, 4), np.float32), name="n" * 10_000_000)
        answer = client.post("/infer", json={"model": "lin", "method": huge, "inputs": [x]})
        assert answer.status_code == 404 and len(answer.content) < 1000
        answer = client.post("/infer", json={"model": "lin", "inputs": [x]})
        assert answer.status_code == 422 and len(answer.content) < 2000, answer.text[:300]
        # File names just under the multipart parser's bound on a header line, and past it.
        answer = upload(
            client,
            "big",
            linear_relu_program.pte,
            program_name="p" * 4000 + ".ptd",
            data=[("d" * 4000 + ".bin", b"x")],
        )
        assert answer.status_code == 422 and len(answer.content) < 5000, len(answer.content)
        rules = {p["rule"] for p in assert_error_shape(answer.content)["problems"]}
        assert {"program.ptd_name", "data.extension"} <= rules
        answer = upload(client, "big", linear_relu_program.pte, program_name="p" * 100_000)
        assert answer.status_code == 422 and len(answer.content) < 1000
        assert_error_shape(answer.content, "upload.malformed")
    server.stop()
    longest = max(len(line) for line in server.log_path.read_text().splitlines())
    assert longest < 2000, longest


def _upload_raw_then_vanish(server, program: bytes) -> None:
    """Declares a full body, sends part of the file, and closes the socket mid-upload."""
    boundary = "hardening-boundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\nlin\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="program"; '
        f'filename="model.pte"\r\nContent-Type: application/octet-stream\r\n\r\n'
    ).encode()
    declared = len(head) + len(program) + 100
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(
            (
                f"POST /models HTTP/1.1\r\nHost: x\r\nContent-Length: {declared}\r\n"
                f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n"
            ).encode()
        )
        sock.sendall(head + program[: len(program) // 2])
        time.sleep(0.5)


def test_a_client_that_disconnects_mid_upload_is_counted_as_aborted(
    start_server, linear_relu_program
):
    server = start_server()
    _upload_raw_then_vanish(server, linear_relu_program.pte.read_bytes())
    deadline = time.monotonic() + 20
    while "outcome=aborted" not in server.log() and time.monotonic() < deadline:
        time.sleep(0.1)
    with server.client() as client:
        metrics = parse(client.get("/metrics").text)
        assert client.get("/models").json() == []
    assert value(metrics, "etrt_uploads_total", outcome="aborted") == 1
    log = server.log()
    assert "upload model=None outcome=aborted" in log
    assert "Exception in ASGI application" not in log and "Traceback" not in log
    assert stored_files(server.artifacts) == ["registry.sqlite3"]


def _digest_header(algorithm: str, content: bytes) -> str:
    name = {"sha-256": "sha256", "sha-512": "sha512"}[algorithm]
    return f"{algorithm}=:{base64.b64encode(hashlib.new(name, content).digest()).decode()}:"


def _upload_with_headers(client, name, program: bytes, headers: dict, fields=None):
    files = [("program", ("model.pte", program, "application/octet-stream", headers))]
    return client.post("/models", data={"name": name, **(fields or {})}, files=files)


def test_uploads_are_verified_against_the_digests_the_client_declares(
    start_server, linear_relu_program
):
    server = start_server()
    program = linear_relu_program.pte.read_bytes()
    corrupted = bytearray(program)
    corrupted[len(corrupted) // 2] ^= 0x01
    corrupted = bytes(corrupted)
    with server.client() as client:
        answer = _upload_with_headers(
            client, "a", program, {"Content-Digest": _digest_header("sha-256", program)}
        )
        assert answer.status_code == 201, answer.text
        assert answer.json()["files"][0]["sha256"] == hashlib.sha256(program).hexdigest()
        answer = _upload_with_headers(
            client,
            "b",
            program,
            {
                "Repr-Digest": (
                    "md5=:AAAAAAAAAAAAAAAAAAAAAA==:, " + _digest_header("sha-512", program)
                )
            },
        )
        assert answer.status_code == 201, answer.text
        answer = _upload_with_headers(
            client,
            "c",
            program,
            {},
            fields={"sha256.model.pte": hashlib.sha256(program).hexdigest().upper()},
        )
        assert answer.status_code == 201, answer.text

        answer = _upload_with_headers(
            client, "d", corrupted, {"Content-Digest": _digest_header("sha-256", program)}
        )
        assert answer.status_code == 422, answer.text
        [problem] = assert_error_shape(answer.content, "upload.digest_mismatch")["problems"]
        assert problem["file"] == "model.pte"
        assert hashlib.sha256(corrupted).hexdigest() in problem["message"]
        answer = _upload_with_headers(
            client,
            "d",
            corrupted,
            {},
            fields={"sha256.model.pte": hashlib.sha256(program).hexdigest()},
        )
        assert_error_shape(answer.content, "upload.digest_mismatch")

        for headers, fields in [
            ({"Content-Digest": "sha-256=not-base64"}, None),
            ({"Content-Digest": "sha-256=:AAAA:"}, None),
            ({"Repr-Digest": "md5=:AAAAAAAAAAAAAAAAAAAAAA==:"}, None),
            ({}, {"sha256.model.pte": "abc"}),
            ({}, {"sha256.other.pte": hashlib.sha256(program).hexdigest()}),
        ]:
            answer = _upload_with_headers(client, "e", program, headers, fields)
            assert answer.status_code == 422, (headers, fields, answer.text)
            assert_error_shape(answer.content, "upload.digest")
        assert [m["name"] for m in client.get("/models").json()] == ["a", "b", "c"]
    assert registry_rows(server.artifacts) == ["a", "b", "c"]
    assert not list((server.artifacts / "staging").iterdir())


def _pid_files(artifacts: Path) -> list[Path]:
    return list((artifacts / "staging").glob("*/*.child-pid"))


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_a_killed_server_takes_its_hanging_load_check_child_with_it(
    start_server, linear_relu_program
):
    server = start_server("--backend-setup", HANG, "--load-check-timeout", "300")
    outcome = {}

    def send():
        try:
            with server.client(timeout=60) as client:
                outcome["answer"] = upload(client, "lin", linear_relu_program.pte)
        except Exception as exc:  # the server is killed under the request
            outcome["error"] = exc

    sender = threading.Thread(target=send)
    sender.start()
    [pid_file] = _wait_for(lambda: _pid_files(server.artifacts), 60, "the load-check child")
    pid = int(pid_file.read_text())
    assert not _gone(pid)
    server.process.send_signal(signal.SIGKILL)
    server.process.wait()
    _wait_for(lambda: _gone(pid), 5, f"load-check child {pid} to die with the server")
    sender.join(30)
    assert "error" in outcome


def _spawn_load_check_child(artifacts: Path, program: Path) -> tuple[subprocess.Popen, Path]:
    """A hanging load-check child as a server would have started it, left behind in staging."""
    staging = (artifacts / "staging" / "left-behind").resolve()
    return spawn_hanging_load_check(staging, str(program))


def test_stale_load_check_children_are_killed_at_start_and_nothing_else(
    tmp_path, linear_relu_program
):
    artifacts = tmp_path / "artifacts"
    child, _ = _spawn_load_check_child(artifacts, linear_relu_program.pte)
    decoy = subprocess.Popen(["sleep", "120"], start_new_session=True)
    decoy_dir = artifacts / "staging" / "decoy"
    decoy_dir.mkdir()
    (decoy_dir / ".load_check.json.child-pid").write_text(str(decoy.pid))
    server = ServerProcess(artifacts)
    try:
        server.start()
        assert child.wait(timeout=10) == -signal.SIGKILL
        assert decoy.poll() is None, "a process that is not our load-check child was killed"
        assert "killed load-check process" in server.log()
        assert not list((artifacts / "staging").iterdir())
    finally:
        server.stop()
        for process in (child, decoy):
            if process.poll() is None:
                process.kill()
                process.wait()


def test_the_server_answers_a_request_after_every_kind_of_refusal(shared_server):
    """Regression: 4xx answers of every origin leave the connection usable."""
    connection = keep_alive(shared_server)
    first = None
    for method, path, body in [
        ("GET", "/nope", None),
        ("PATCH", "/models", None),
        ("POST", "/infer", {"model": "none", "inputs": []}),
        ("POST", "/infer", {"inputs": "x"}),
        ("GET", "/models/none", None),
        ("DELETE", "/models/none", None),
    ]:
        status, _, answer = request(connection, method, path, body)
        assert 400 <= status < 500, (method, path, status)
        assert_error_shape(answer)
        first = first or connection.sock
        assert connection.sock is first, (method, path)
    status, _, _ = request(connection, "GET", "/health/live")
    assert status == 200 and connection.sock is first
