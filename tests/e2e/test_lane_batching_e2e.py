"""Dynamic batching in the engine's native lane (runtime_ext/lane/batcher.h), on a real server:
once a merging method's first execute was measured (it runs in Python), requests to it from the
fronts' native path are merged by the lane, with Python's policy, the same answers, counts and
errors as the Python scheduler gives (tests/e2e/test_batching_e2e.py covers those)."""

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
from support.program_fixtures import dynamic_batch_program, dynamic_lookup_program  # noqa: F401
from support.prometheus import parse, value
from support.server import tensor, upload

LABELS = {"model": "b", "method": "forward"}


def lane_requests(client, model: str = "b") -> float:
    parsed = parse(client.get("/metrics").text)
    return value(parsed, "etrt_engine_lane_requests_total", model=model, method="forward") or 0


def deployed(server, name: str, pte, config: dict, first: np.ndarray) -> None:
    """Uploads the model and runs its first request (which Python runs and measures)."""
    with server.client() as client:
        created = upload(client, name, pte, fields=configured(config))
        assert created.status_code == 201, created.text
        answer = client.post("/infer", json={"model": name, "inputs": [tensor(first)]})
        assert answer.status_code == 200, answer.text
        assert lane_requests(client, name) == 0


def test_the_lane_merges_requests_with_the_unbatched_answers_and_triton_counts(
    start_server, dynamic_batch_program
):
    server = start_server()
    config = {
        "max_batch_size": 16,
        "dynamic_batching": {"max_queue_delay_microseconds": 20000},
        "instance_group": [{"count": 1}],
    }
    deployed(server, "b", dynamic_batch_program.pte, config, np.ones((1, 4), np.float32))
    rng = np.random.default_rng(5)
    inputs = [
        rng.standard_normal((int(rng.integers(1, 4)), 4)).astype(np.float32) for _ in range(48)
    ]

    def call(index):
        with server.client() as client:
            return client.post("/infer", json={"model": "b", "inputs": [tensor(inputs[index])]})

    responses = concurrently(len(inputs), call)
    assert_unbatched_answers(dynamic_batch_program.module, inputs, responses)
    with server.client() as client:
        assert lane_requests(client) == len(inputs)  # every one merged by the lane
        parsed = parse(client.get("/metrics").text)
    rows = 1 + sum(len(x) for x in inputs)
    batches = value(parsed, "etrt_batch_size_count", **LABELS)
    assert value(parsed, "etrt_batch_size_sum", **LABELS) == rows
    assert batches < len(inputs), "nothing merged"
    assert value(parsed, "etrt_batch_size_bucket", le="16", **LABELS) == batches
    assert value(parsed, "etrt_inference_requests_total", outcome="ok", **LABELS) == 1 + len(inputs)
    assert value(parsed, "etrt_inference_queue_seconds_count", **LABELS) == 1 + len(inputs)
    with triton_http.InferenceServerClient(server.url.removeprefix("http://")) as triton:
        [stats] = triton.get_inference_statistics("b")["model_stats"]
    with triton_grpc.InferenceServerClient(server.grpc_url) as triton:
        [over_grpc] = triton.get_inference_statistics("b", as_json=True)["model_stats"]
    assert stats["inference_count"] == rows
    assert stats["execution_count"] == batches
    assert sum(b["compute_infer"]["count"] for b in stats["batch_stats"]) == batches
    assert sum(b["batch_size"] * b["compute_infer"]["count"] for b in stats["batch_stats"]) == rows
    for phase in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert stats["inference_stats"][phase]["count"] == 1 + len(inputs), phase
    assert int(over_grpc["execution_count"]) == batches


def test_v2_binary_requests_are_merged_too(start_server, dynamic_batch_program):
    server = start_server()
    config = {"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 50000}}
    deployed(server, "b", dynamic_batch_program.pte, config, np.ones((2, 4), np.float32))
    inputs = [np.full((1, 4), i, np.float32) for i in range(16)]

    def call(index):
        with triton_http.InferenceServerClient(server.url.removeprefix("http://")) as triton:
            given = triton_http.InferInput("input_0", [1, 4], "FP32")
            given.set_data_from_numpy(inputs[index], binary_data=True)
            wanted = triton_http.InferRequestedOutput("output_0", binary_data=True)
            return triton.infer("b", [given], outputs=[wanted]).as_numpy("output_0")

    for x, got in zip(inputs, concurrently(len(inputs), call)):
        expected = dynamic_batch_program.module(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    with server.client() as client:
        assert lane_requests(client) == len(inputs)
        assert executions(client, "b") < 1 + len(inputs)


def test_a_request_the_kernels_refuse_fails_alone_its_batch_mates_answered(
    start_server, dynamic_lookup_program
):
    server = start_server()
    first = np.zeros((1, 3), np.int64)
    deployed(server, "lookup", dynamic_lookup_program.pte, LOOKUP_BATCHING, first)
    responses = lookups_with_one_refused(server, dynamic_lookup_program.module)
    with server.client() as client:
        # the refused one is counted by Python, which answered it
        assert lane_requests(client, "lookup") == len(responses) - 1
        parsed = parse(client.get("/metrics").text)
    assert (
        value(
            parsed,
            "etrt_inference_requests_total",
            model="lookup",
            method="forward",
            outcome="ok",
        )
        == len(responses)  # the first request and the 11 answered
    )


def test_a_client_that_leaves_while_its_request_waits_for_a_batch_is_never_executed(
    start_server, dynamic_batch_program
):
    server = start_server()
    config = {"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 1_000_000}}
    deployed(server, "b", dynamic_batch_program.pte, config, np.ones((1, 4), np.float32))
    body = {"model": "b", "inputs": [tensor(np.ones((1, 4), np.float32))]}
    with pytest.raises(httpx.ReadTimeout):
        with server.client(timeout=0.3) as client:
            client.post("/infer", json=body)
    time.sleep(1.5)  # past the delay: had it stayed queued, it would have run by now
    with server.client() as client:
        assert executions(client, "b") == 1  # the first request's
        parsed = parse(client.get("/metrics").text)
        assert value(parsed, "etrt_inference_requests_total", outcome="cancelled", **LABELS) == 1
        assert client.post("/infer", json=body).status_code == 200  # the queue still works
        assert executions(client, "b") == 2
        assert lane_requests(client) == 1
