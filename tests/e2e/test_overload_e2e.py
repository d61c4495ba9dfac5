"""Overload from every protocol at once: one bounded queue per model method, shared by native
JSON `/infer`, v2 REST JSON, v2 REST binary and gRPC, admits each protocol's requests (none
starves the others), refuses the rest with 503 / UNAVAILABLE and never a server error, and names
a Retry-After taken from the queue's drain time, over gRPC too (`retry-after` trailing metadata
and the message). Once the engine has refused a queue as full, the fronts' gate refuses the next
requests for it without crossing to the engine, and opens again once the queue has drained.

The flood's clients run on the same 2 busy cores as the server, so every figure here is a ratio
with a wide margin, never a duration."""

import asyncio
import json
import math
import os
import re
import signal
import threading
import time

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2
from tritonclient.utils import InferenceServerException

from service.config import Settings
from support import programs
from support.flood import INFER_METHOD, PROBE_EVERY_S, PROBES, PROTOCOLS, flood
from support.processes import role_pids
from support.prometheus import parse, value
from support.server import tensor, upload

WIDTH, LAYERS = 2048, 4  # about 10 ms per execute alone, several times that under the flood
CONNECTIONS = 16  # per protocol: 64 in all, well past the queue and the instance
MAX_QUEUE = 40
SECONDS = 6.0
HEAVY_SIZE = 40_000  # with 1,000 rounds, about half a second per execute here
HEALTH, METRICS = PROBES  # GET /v2/health/ready, GET /metrics


@pytest.fixture(scope="module")
def weight_bound(programs_dir):
    return programs.export_weight_bound(programs_dir, WIDTH, LAYERS)


@pytest.fixture(scope="module")
def heavy(programs_dir):
    return programs.export_cpu_heavy(programs_dir, rounds=1000, size=HEAVY_SIZE)


def _deploy(server, name, exported, max_queue):
    config = {
        "dynamic_batching": {"default_queue_policy": {"max_queue_size": max_queue}},
        "instance_group": [{"count": 1}],
    }
    with server.client() as client:
        created = upload(
            client, name, exported.pte, exported.ptds, fields={"config": json.dumps(config)}
        )
        assert created.status_code == 201, created.text


def test_a_mixed_flood_is_served_fairly_and_refused_with_a_drain_time(start_server, weight_bound):
    server = start_server("--workers", "1")
    _deploy(server, "flood", weight_bound, MAX_QUEUE)
    x = np.random.default_rng(0).standard_normal((1, WIDTH)).astype(np.float32)
    outcomes = flood(server.port, server.grpc_url, "flood", x, SECONDS, CONNECTIONS, probes=PROBES)
    health, metrics = outcomes.pop(HEALTH), outcomes.pop(METRICS)
    served = sum(o.ok for o in outcomes.values())
    assert served > 0, outcomes
    shares = {p: round(o.ok / served, 3) for p, o in outcomes.items()}
    for protocol in PROTOCOLS:
        outcome = outcomes[protocol]
        # A fair share is a quarter; a protocol that a side path starved got 1 % (issue 20).
        # gRPC gets about 0.1 here: under an HTTP flood its calls take the front ~0.5-1 s to
        # answer, refusals included, so it asks ~20x less often than an HTTP connection, and
        # it cannot be let through more often than it asks (it is on about half its asks).
        assert outcome.ok > 0.05 * served, shares
        assert outcome.refused > 0, f"{protocol} was never refused: the flood did not overload"
        assert outcome.other == {}, f"{protocol}: answers other than 200 and 503: {outcome.other}"
    # Every refusal, gRPC's included, says when to come back, in whole seconds, at least 1, from
    # the queue's drain time: about MAX_QUEUE requests ahead, each taking what the flood's took.
    retries = [r for o in outcomes.values() for r in o.retry_after_s]
    assert len(retries) == sum(o.refused for o in outcomes.values())
    assert all(r >= 1 and r == math.floor(r) for r in retries), set(retries)
    drain_s = MAX_QUEUE * SECONDS / served
    median = float(np.median(retries))
    assert 0.5 * drain_s <= median <= 2.0 * drain_s + 1, (median, drain_s)
    # Every refusal was counted, those of the fronts' gates too (made on the native path for
    # the requests it reads, on the Python path for the rest).
    with server.client() as client:
        samples = parse(client.get("/metrics").text)["samples"]
    counted: dict[str, float] = {}
    for (name, labels), count in samples.items():
        if name == "etrt_inference_requests_total" and ("model", "flood") in labels:
            outcome = dict(labels)["outcome"]
            counted[outcome] = counted.get(outcome, 0) + count
    refused = sum(o.refused for o in outcomes.values())
    assert counted.pop("ok", 0) >= served, counted
    assert counted == {"busy": refused}, (counted, refused)
    # The fronts run below the engine's CPU priority: their refusals wait for its executes.
    (engine,) = role_pids(server, "engine")
    below = Settings().front_nice
    lowered = min(os.getpriority(os.PRIO_PROCESS, engine) + below, 19)  # 19: the lowest there is
    assert [os.getpriority(os.PRIO_PROCESS, pid) for pid in role_pids(server, "front")] == [lowered]
    # Readiness probes were answered all along, and never waited behind inference work: a probe
    # that queued behind the flood's requests would take about as long as they do (their p50 is
    # the queue's drain time). The bound is loose (clients and server share 2 busy cores);
    # bench/bench_flood.py measures the p99 itself.
    assert health.other == {} and health.ok >= SECONDS / PROBE_EVERY_S / 4, health
    inference_p50 = np.percentile([t for o in outcomes.values() for t in o.latencies_s], 50)
    assert np.percentile(health.latencies_s, 99) < 0.5 * inference_p50, (
        np.percentile(health.latencies_s, [50, 99]),
        inference_p50,
    )
    # So was /metrics, which the engine renders: a front with requests in flight answers from
    # the engine's last page (service/shared/metrics_snapshot.py) in one turn of its loop, as
    # it answers a probe, rather than waiting two more for the engine's answer.
    assert metrics.other == {} and metrics.ok >= SECONDS / PROBE_EVERY_S / 20, metrics
    assert np.percentile(metrics.latencies_s, 99) < 0.5 * inference_p50, (
        np.percentile(metrics.latencies_s, [50, 90, 99]),
        inference_p50,
    )


def _sent_to_engine(server) -> float:
    with server.client() as client:
        metrics = parse(client.get("/metrics").text)
    return value(metrics, "etrt_front_requests_total", front="0") or 0.0


def _queued(server) -> float:
    with server.client() as client:
        metrics = parse(client.get("/metrics").text)
    return value(metrics, "etrt_queue_depth", model="heavy", method="forward") or 0.0


async def _at_once(server, body, count) -> list[httpx.Response]:
    """`count` native requests sent together, each on its own connection."""
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
        return await asyncio.gather(*[client.post("/infer", json=body) for _ in range(count)])


def _raw_infer(channel, x) -> tuple[grpc.StatusCode, str, dict]:
    """A raw ModelInfer call's status, details and trailing metadata (tritonclient shows only
    the first two)."""
    request = service_pb2.ModelInferRequest(model_name="heavy")
    request.inputs.add(name="input_0", datatype="FP32", shape=list(x.shape))
    request.raw_input_contents.append(x.tobytes())
    try:
        channel.unary_unary(INFER_METHOD)(request.SerializeToString(), timeout=120)
    except grpc.RpcError as exc:
        return exc.code(), exc.details(), dict(exc.trailing_metadata() or ())
    return grpc.StatusCode.OK, "", {}


def test_a_full_queue_is_refused_in_the_front_until_it_drains(start_server, heavy):
    server = start_server("--workers", "1")
    _deploy(server, "heavy", heavy, 2)
    x = np.random.default_rng(1).random(HEAVY_SIZE).astype(np.float32)
    body = {"model": "heavy", "inputs": [tensor(x)]}
    with server.client() as client:
        assert client.post("/infer", json=body).status_code == 200  # the execute time is known
    codes = []

    def send():
        with httpx.Client(base_url=server.url, timeout=120) as client:
            codes.append(client.post("/infer", json=body).status_code)

    triton = grpcclient.InferenceServerClient(server.grpc_url)
    inputs = [grpcclient.InferInput("input_0", list(x.shape), "FP32")]
    inputs[0].set_data_from_numpy(x)
    channel = grpc.insecure_channel(server.grpc_url)
    grpc.channel_ready_future(channel).result(timeout=30)
    # The queue must be full when the gRPC request arrives: an execute that ends in between
    # frees a place and the request is queued instead (a race of the machine, not of the
    # server), so a wave that drained first is let finish and the wave is sent again.
    for _ in range(3):
        codes.clear()  # of this wave
        busy = [threading.Thread(target=send) for _ in range(3)]  # one executes, two wait
        for thread in busy:
            thread.start()
        deadline = time.monotonic() + 30
        while _queued(server) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        crossed = _sent_to_engine(server)
        try:
            triton.infer("heavy", inputs)  # served: the queue had a place again
        except InferenceServerException as error:
            refused = error
            break
        for thread in busy:
            thread.join()
    else:
        pytest.fail("a gRPC request to a full queue was served in each of 3 waves")
    assert refused.status() == "StatusCode.UNAVAILABLE"
    assert "max_queue_size 2" in refused.message()
    # The queue's drain time: two executes of about half a second, more on a loaded machine.
    hint = re.search(r"\(retry after (\d+) s\)", refused.message())
    assert hint is not None and 1 <= int(hint[1]) <= 5, refused.message()
    hint = hint[1]
    # The engine has said the queue is full: until a place frees (an execute from then), the
    # next requests are refused by the front alone, every protocol's, with the same hint.
    code, details, trailers = _raw_infer(channel, x)
    channel.close()
    with httpx.Client(base_url=server.url, timeout=120) as client:
        v2 = client.post(
            "/v2/models/heavy/infer",
            json={"inputs": [{"name": "input_0", "shape": [HEAVY_SIZE], "datatype": "FP32"}]},
        )  # refused before its body is read: without data, a read body would be a 400
    native = asyncio.run(_at_once(server, body, 5))
    assert v2.status_code == 503 and v2.headers["retry-after"] == hint, v2.text
    assert code == grpc.StatusCode.UNAVAILABLE and trailers["retry-after"] == hint, trailers
    assert "max_queue_size 2" in details and f"(retry after {hint} s)" in details
    # On a busy machine places free meanwhile (an execute of the wave ends while the five
    # connect; seen: three of five served on a loaded 2-core machine): one request per place
    # is let through, the rest refused by the front, and what crossed is bounded below.
    native_codes = [r.status_code for r in native]
    assert set(native_codes) <= {200, 503} and native_codes.count(503) >= 1, native_codes
    # The engine's hint, or a fresher one where a freed place let a request through to it.
    hints = {int(r.headers["retry-after"]) for r in native if r.status_code == 503}
    assert hints and all(1 <= h <= 5 for h in hints), hints
    # Of the eight, only the first (and what a freed place let through) crossed.
    assert _sent_to_engine(server) - crossed <= 1 + native_codes.count(200) + 1
    for thread in busy:
        thread.join()
    assert codes == [200, 200, 200]
    # Drained: the gate has opened again.
    assert triton.infer("heavy", inputs).as_numpy("output_0").shape == x.shape
    with server.client() as client:
        assert client.post("/infer", json=body).status_code == 200


def test_a_grpc_call_during_an_engine_restart_says_when_to_come_back(start_server):
    server = start_server("--workers", "1")
    (engine,) = role_pids(server, "engine")
    os.kill(engine, signal.SIGKILL)
    x = np.ones(4, np.float32)
    deadline = time.monotonic() + 30
    with grpc.insecure_channel(server.grpc_url) as channel:
        while time.monotonic() < deadline:
            code, details, trailers = _raw_infer(channel, x)
            if code == grpc.StatusCode.UNAVAILABLE and "restarting" in details:
                break
            time.sleep(0.01)
        else:
            pytest.fail("no gRPC call saw the engine down")
    seconds = int(trailers["retry-after"])
    assert seconds >= 1 and f"(retry after {seconds} s)" in details, (details, trailers)
