"""Model configuration, dynamic batching, bounded queues and deadlines on a real server process."""

import json
import threading
import time

import httpx
import numpy as np
import pytest
import torch
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http

from support import programs
from support.batching import (
    LOOKUP_BATCHING,
    assert_unbatched_answers,
    concurrently,
    configured,
    executions,
    lookups_with_one_refused,
)
from support.program_fixtures import (
    dynamic_batch_program,
    dynamic_lookup_program,
    linear_relu_program,  # noqa: F401
    weight_bound_program,
)
from support.prometheus import parse, value
from support.server import registry_rows, tensor, upload

WIDTH = 1024


@pytest.fixture(scope="module")
def wide_program(programs_dir):
    """4 x Linear(2048, 2048): its execute costs several times its small request's HTTP path."""
    return programs.export_weight_bound(programs_dir, width=2048)


def test_the_configuration_is_stored_shown_and_kept_across_a_restart(
    start_server, dynamic_batch_program
):
    server = start_server()
    config = {
        "max_batch_size": 8,
        "dynamic_batching": {"max_queue_delay_microseconds": 2000},
        "instance_group": [{"count": 1}],
    }
    with server.client() as client:
        created = upload(client, "b", dynamic_batch_program.pte, fields=configured(config))
        assert created.status_code == 201, created.text
        expected = {
            **config,
            "dynamic_batching": {
                "max_queue_delay_microseconds": 2000,
                "preferred_batch_size": [],
                "default_queue_policy": {"max_queue_size": 0, "default_timeout_microseconds": 0},
            },
        }
        assert created.json()["config"] == expected
        assert upload(client, "plain", dynamic_batch_program.pte).json()["config"] == {}
    server.restart()
    with server.client() as client:
        assert client.get("/models/b").json()["config"] == expected


def test_refused_configurations_name_their_rule_beside_other_problems(
    start_server, dynamic_batch_program, linear_relu_program
):
    server = start_server()
    cases = [
        # (program, data files, config field, rules expected)
        (
            dynamic_batch_program.pte,
            [("bad name.ptd", b"x")],
            '{"max_batch_size": 4, "colour": 1}',
            {"config.unknown_key", "data.characters", "data.invalid"},
        ),
        (
            linear_relu_program.pte,
            [],
            '{"max_batch_size": 2, "dynamic_batching": {}}',
            {"config.not_batchable"},
        ),
        (
            dynamic_batch_program.pte,
            [],
            '{"max_batch_size": 64, "dynamic_batching": {}}',
            {"config.max_batch_size"},
        ),
        (dynamic_batch_program.pte, [], '{"max_batch_size": 4,', {"config.json"}),
    ]
    with server.client() as client:
        for pte, data, config, expected in cases:
            response = upload(client, "m", pte, data=data, fields={"config": config})
            assert response.status_code == 422, response.text
            problems = response.json()["problems"]
            assert {p["rule"] for p in problems} == expected, problems
            assert all(p["message"] for p in problems)
        assert client.get("/models").json() == []
    assert registry_rows(server.artifacts) == []


def test_concurrent_requests_are_batched_and_each_gets_the_unbatched_answer(
    start_server, dynamic_batch_program
):
    server = start_server()
    config = {
        "max_batch_size": 16,
        "dynamic_batching": {"max_queue_delay_microseconds": 20000},
        "instance_group": [{"count": 1}],
    }
    rng = np.random.default_rng(7)
    inputs = [
        rng.standard_normal((int(rng.integers(1, 4)), 4)).astype(np.float32) for _ in range(48)
    ]
    with server.client() as client:
        assert (
            upload(client, "b", dynamic_batch_program.pte, fields=configured(config)).status_code
            == 201
        )

    def call(index):
        with server.client() as client:
            return client.post("/infer", json={"model": "b", "inputs": [tensor(inputs[index])]})

    responses = concurrently(len(inputs), call)
    assert_unbatched_answers(dynamic_batch_program.module, inputs, responses)
    with server.client() as client:
        parsed = parse(client.get("/metrics").text)
    labels = {"model": "b", "method": "forward"}
    assert value(parsed, "etrt_batch_size_sum", **labels) == sum(len(x) for x in inputs)
    assert value(parsed, "etrt_batch_size_count", **labels) < len(inputs), "nothing merged"
    assert value(parsed, "etrt_batch_size_bucket", le="16", **labels) == value(
        parsed, "etrt_batch_size_count", **labels
    )  # no batch past max_batch_size
    assert value(parsed, "etrt_queue_depth", **labels) == 0
    # The statistics extension counts the same executes, as Triton does: each execute once,
    # under the batch size it ran with; every row an inference; every request its phases.
    with triton_http.InferenceServerClient(server.url.removeprefix("http://")) as triton:
        [stats] = triton.get_inference_statistics("b")["model_stats"]
    with triton_grpc.InferenceServerClient(server.grpc_url) as triton:
        [over_grpc] = triton.get_inference_statistics("b", as_json=True)["model_stats"]
    rows = sum(len(x) for x in inputs)
    assert stats["inference_count"] == rows
    assert stats["execution_count"] == value(parsed, "etrt_batch_size_count", **labels)
    assert stats["execution_count"] < len(inputs) < stats["inference_count"]
    batches = stats["batch_stats"]
    assert sum(b["compute_infer"]["count"] for b in batches) == stats["execution_count"]
    assert sum(b["batch_size"] * b["compute_infer"]["count"] for b in batches) == rows
    assert max(b["batch_size"] for b in batches) <= 16
    phases = stats["inference_stats"]
    for phase in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert phases[phase]["count"] == len(inputs), phase
    assert int(over_grpc["execution_count"]) == stats["execution_count"]
    assert int(over_grpc["inference_count"]) == rows


def test_a_flood_on_a_bounded_queue_gets_quick_503s_with_retry_after(start_server, wide_program):
    server = start_server()
    config = {
        "dynamic_batching": {"default_queue_policy": {"max_queue_size": 2}},
        "instance_group": [{"count": 1}],
    }
    body = {"model": "heavy", "inputs": [tensor(np.ones((1, 2048), np.float32))]}
    with server.client() as client:
        assert (
            upload(client, "heavy", wide_program.pte, fields=configured(config)).status_code == 201
        )
        begun = time.monotonic()
        for _ in range(3):
            assert client.post("/infer", json=body).status_code == 200
        single = (time.monotonic() - begun) / 3

    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32)
    with httpx.Client(base_url=server.url, timeout=60, limits=limits) as shared:
        begun = time.monotonic()
        results = concurrently(24, lambda _: shared.post("/infer", json=body))
        elapsed = time.monotonic() - begun
    codes = [r.status_code for r in results]
    assert set(codes) <= {200, 503}, codes
    assert codes.count(200) >= 1 and codes.count(503) >= 12, codes
    for response in results:
        if response.status_code == 503:
            assert int(response.headers["retry-after"]) >= 1
            assert "max_queue_size 2" in response.json()["error"]
    # Unbounded, the 24 would be executed one after the other on the one instance.
    assert elapsed < 24 * single, (elapsed, single)
    with server.client() as client:
        assert executions(client, "heavy") == 3 + codes.count(200)


def test_deadlines_expire_in_the_queue_with_504_and_are_never_executed(
    start_server, wide_program, dynamic_batch_program
):
    server = start_server()
    waiting = {
        "dynamic_batching": {"default_queue_policy": {"default_timeout_microseconds": 30_000}},
        "instance_group": [{"count": 1}],
    }
    batching = {
        "max_batch_size": 8,
        "dynamic_batching": {
            "max_queue_delay_microseconds": 3_000_000,
            "default_queue_policy": {"default_timeout_microseconds": 100_000},
        },
    }
    body = {"model": "heavy", "inputs": [tensor(np.ones((1, 2048), np.float32))]}
    with server.client() as client:
        assert (
            upload(client, "heavy", wide_program.pte, fields=configured(waiting)).status_code == 201
        )
        assert (
            upload(client, "b", dynamic_batch_program.pte, fields=configured(batching)).status_code
            == 201
        )

    limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
    with httpx.Client(base_url=server.url, timeout=60, limits=limits) as shared:
        responses = concurrently(12, lambda _: shared.post("/infer", json=body))
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 504} and codes.count(504) >= 1, codes
    assert all("not executed" in r.json()["error"] for r in responses if r.status_code == 504)
    with server.client() as client:
        assert executions(client, "heavy") == codes.count(200)
        begun = time.monotonic()
        response = client.post(
            "/infer", json={"model": "b", "inputs": [tensor(np.ones((1, 4), np.float32))]}
        )
        assert response.status_code == 504, response.text
        assert 0.09 < time.monotonic() - begun < 2.0  # the timeout, not the 3 s batching delay
        assert "not executed" in response.json()["error"]
        time.sleep(0.2)
        assert executions(client, "b") == 0


def test_a_client_that_disconnects_while_queued_is_never_executed(
    start_server, dynamic_batch_program
):
    server = start_server()
    config = {"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 1_000_000}}
    with server.client() as client:
        assert (
            upload(client, "b", dynamic_batch_program.pte, fields=configured(config)).status_code
            == 201
        )
    body = {"model": "b", "inputs": [tensor(np.ones((1, 4), np.float32))]}
    with pytest.raises(httpx.ReadTimeout):
        with server.client(timeout=0.3) as client:
            client.post("/infer", json=body)
    time.sleep(1.5)  # past the delay: had it stayed queued, it would have run by now
    with server.client() as client:
        assert executions(client, "b") == 0
        parsed = parse(client.get("/metrics").text)
        assert (
            value(
                parsed,
                "etrt_inference_requests_total",
                model="b",
                method="forward",
                outcome="cancelled",
            )
            == 1
        )
        assert client.post("/infer", json=body).status_code == 200  # the queue still works
        assert executions(client, "b") == 1


def test_the_configuration_may_be_sent_as_a_file_part(start_server, dynamic_batch_program):
    server = start_server()
    with server.client() as client:
        response = client.post(
            "/models",
            data={"name": "b"},
            files=[
                ("program", ("model.pte", dynamic_batch_program.pte.read_bytes())),
                ("config", ("config.json", b'{"max_batch_size": 4, "dynamic_batching": {}}')),
            ],
        )
        assert response.status_code == 201, response.text
        assert response.json()["config"]["max_batch_size"] == 4


def test_one_bad_request_in_a_batch_fails_alone_and_its_batch_mates_get_answers(
    start_server, dynamic_lookup_program
):
    server = start_server()
    with server.client() as client:
        created = upload(
            client, "lookup", dynamic_lookup_program.pte, fields=configured(LOOKUP_BATCHING)
        )
        assert created.status_code == 201, created.text
    responses = lookups_with_one_refused(server, dynamic_lookup_program.module)
    for response in responses:
        assert "/" + str(server.artifacts).strip("/") not in response.text
        assert ".cpp" not in response.text and "/work/" not in response.text
    with triton_http.InferenceServerClient(server.url.removeprefix("http://")) as triton:
        [stats] = triton.get_inference_statistics("lookup")["model_stats"]
    # They were merged (the 11 good ones in fewer executes), and only the 11 are inferences.
    assert stats["inference_count"] == 11
    assert stats["execution_count"] < 11
    assert stats["inference_stats"]["fail"]["count"] == 1
