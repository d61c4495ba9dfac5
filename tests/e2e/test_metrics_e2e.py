"""/metrics of a real server process, after real uploads and requests, parsed as a scraper would.

The TensorRT part uses the test engine provider (support.test_backend_setup) with a stand-in GPU
that reads host memory, so only alignment makes the delegate stage a buffer: a program planned on
16-byte boundaries is staged through aligned copies, and /metrics must count exactly the copies
ingest predicted per call, under the model, method and delegate index the description uses.
"""

import json
import os
import signal
import socket
import threading
import time

import numpy as np
import pytest

from support import programs
from support.processes import role_pids
from support.program_fixtures import linear_relu_program  # noqa: F401
from support.prometheus import parse, series, value
from support.server import tensor, upload
from support.trt_program_fixtures import mixed_16, mixed_256  # noqa: F401

TEST_BACKEND = "support.test_backend_setup:install_test_backend_reading_host_memory"
UNKNOWN = "(unknown)"


def scrape(client):
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(response.text)


def test_requests_uploads_and_models_show_in_metrics(start_server, linear_relu_program):
    server = start_server("--access-log")
    with server.client() as client:
        assert value(scrape(client), "etrt_models", state="ready") == 0
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
        x = np.ones((2, 4), np.float32)
        for _ in range(3):
            assert (
                client.post("/infer", json={"model": "lin", "inputs": [tensor(x)]}).status_code
                == 200
            )
        bad = client.post("/infer", json={"model": "lin", "inputs": [tensor(x, datatype="FP64")]})
        assert bad.status_code == 422, bad.text
        refused = upload(client, "lin2", linear_relu_program.pte, program_name="model.ptd")
        assert refused.status_code == 422, refused.text
        parsed = scrape(client)

    assert (
        value(parsed, "etrt_inference_requests_total", model="lin", method="forward", outcome="ok")
        == 3
    )
    assert (
        value(
            parsed,
            "etrt_inference_requests_total",
            model="lin",
            method="forward",
            outcome="client_error",
        )
        == 1
    )
    assert (
        value(parsed, "etrt_inference_duration_seconds_count", model="lin", method="forward") == 4
    )
    assert (
        value(
            parsed,
            "etrt_inference_duration_seconds_bucket",
            model="lin",
            method="forward",
            le="+Inf",
        )
        == 4
    )
    assert value(parsed, "etrt_inference_queue_seconds_count", model="lin", method="forward") == 3
    assert value(parsed, "etrt_inflight_requests", model="lin") == 0
    assert series(parsed, "etrt_uploads_total") == {
        frozenset({("outcome", "accepted")}): 1,
        frozenset({("outcome", "refused")}): 1,
    }
    assert value(parsed, "etrt_ingest_problems_total", rule="program.ptd_name") == 1
    assert value(parsed, "etrt_models", state="ready") == 1
    assert {kind for kind in parsed["types"].values()} == {"counter", "histogram", "gauge"}

    log = server.log()
    assert log.count("infer model='lin' method='forward' outcome=ok duration_s=") == 3
    assert log.count("infer model='lin' method='forward' outcome=client_error duration_s=") == 1
    assert "upload model='lin' outcome=accepted problems=0 duration_s=" in log
    assert "upload model='lin2' outcome=refused problems=1 duration_s=" in log


def staging(parsed, model):
    """{(delegate, binding): copies} of one model."""
    found = {}
    for labels, copies in series(parsed, "etrt_tensorrt_staging_copies_total").items():
        labels = dict(labels)
        if labels.pop("model") == model:
            assert labels["method"] == "forward"
            found[labels["delegate"], labels["binding"]] = copies
    return found


def test_tensorrt_staging_copies_are_counted_per_model_and_delegate(
    start_server, mixed_16, mixed_256
):
    server = start_server("--backend-setup", TEST_BACKEND)
    calls = 3
    with server.client() as client:
        response = upload(client, "mixed16", mixed_16.pte)
        assert response.status_code == 201, response.text
        [method] = response.json()["methods"]
        expected = {
            str(i): d["details"]["placement"]["expected_staging_copies_per_call"]
            for i, d in enumerate(method["delegates"])
        }
        unaligned = {
            (str(i), b["binding"])
            for i, d in enumerate(method["delegates"])
            for b in d["details"]["placement"]["buffers"]
            if b["aligned"] is False
        }
        assert sum(expected.values()) > 0
        assert upload(client, "mixed256", mixed_256.pte).status_code == 201
        for seed in range(calls):
            for model, program in (("mixed16", mixed_16), ("mixed256", mixed_256)):
                inputs = [tensor(x) for x in program.example_inputs(seed)]
                response = client.post("/infer", json={"model": model, "inputs": inputs})
                assert response.status_code == 200, response.text
        parsed = scrape(client)

        copies = staging(parsed, "mixed16")
        assert {binding for _, binding in copies} <= {"input0", "input1", "output0"}
        per_delegate = {d: sum(v for (dd, _), v in copies.items() if dd == d) for d in expected}
        assert per_delegate == {d: n * calls for d, n in expected.items()}
        assert {key for key, n in copies.items() if n} == unaligned
        aligned = staging(parsed, "mixed256")
        assert {d for d, _ in aligned} == {"0", "1"} and set(aligned.values()) == {0}

        assert client.delete("/models/mixed16").status_code == 204
        parsed = scrape(client)
        assert staging(parsed, "mixed16") == {}
        assert staging(parsed, "mixed256") == aligned


@pytest.fixture(scope="module")
def slow(programs_dir):
    return programs.export_slow(programs_dir, rounds=60)  # about a second per execute here


def test_a_busy_front_answers_a_scrape_from_the_engines_last_page(start_server, slow):
    """A front with a request in flight answers /metrics from the page the engine last rendered
    (service/shared/metrics_snapshot.py): it answers while the engine is stopped. An idle front
    asks the engine, so a scrape after an answer counts it."""
    server = start_server("--workers", "1", "--metrics-max-age-ms", "60000")
    config = {"instance_group": [{"count": 1}]}
    with server.client() as client:
        created = upload(client, "slow", slow.pte, slow.ptds, fields={"config": json.dumps(config)})
        assert created.status_code == 201, created.text
        body = {"inputs": [tensor(slow.example_inputs[0].numpy(), "input_0")]}
        assert client.post("/v2/models/slow/infer", json=body).status_code == 200
        ok = {"model": "slow", "method": "forward", "outcome": "ok"}
        before = value(scrape(client), "etrt_inference_requests_total", **ok)  # asked; published
        assert before == 1
        answers = []
        running = threading.Thread(
            target=lambda: answers.append(client.post("/v2/models/slow/infer", json=body))
        )
        running.start()
        time.sleep(0.3)  # the request is executing: its front holds its slot
        (engine,) = role_pids(server, "engine")
        os.kill(engine, signal.SIGSTOP)
        try:
            with server.client(timeout=5.0) as other:  # through the route (it sends Connection)
                during = value(scrape(other), "etrt_inference_requests_total", **ok)
            bare = _bare_scrape(server.port)  # answered where it arrives (protocols/health.py)
        finally:
            os.kill(engine, signal.SIGCONT)
        running.join(60)
        assert answers and answers[0].status_code == 200, answers
        assert during == before  # the engine's last page, rendered before the request ended
        assert bare.startswith(b"HTTP/1.1 200 OK\r\n"), bare[:200]
        assert b"content-type: text/plain; version=0.0.4" in bare.lower()
        page = parse(bare.split(b"\r\n\r\n", 1)[1].decode())
        assert value(page, "etrt_inference_requests_total", **ok) == before
        assert value(scrape(client), "etrt_inference_requests_total", **ok) == before + 1


def _bare_scrape(port: int) -> bytes:
    """GET /metrics as Prometheus sends it (no Connection header), read to its whole body."""
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: t\r\nUser-Agent: Prometheus\r\n\r\n")
        got = b""
        while b"\r\n\r\n" not in got or len(got.split(b"\r\n\r\n", 1)[1]) < _length(got):
            chunk = sock.recv(65536)
            assert chunk, got
            got += chunk
        return got


def _length(answer: bytes) -> int:
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
    return next(int(line.split(":")[1]) for line in head.split("\r\n") if "content-length" in line)
