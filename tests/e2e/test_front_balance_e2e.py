"""Issue 34, item 6, against a real server with two fronts: four keep-alive clients, each on one
long-lived connection opened at the same time, are spread over both fronts (by the fronts'
connection counts, service/front/protocols/fair_accept.py), not all served by the one that
woke first.
"""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np

from support.program_fixtures import linear_relu_program  # noqa: F401
from support.prometheus import parse, series
from support.server import tensor, upload

CLIENTS, REQUESTS = 4, 40


def _served(server) -> dict[str, float]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        samples = series(parse(client.get("/metrics").text), "etrt_front_requests_total")
    return {dict(labels)["front"]: v for labels, v in samples.items()}


def test_four_keep_alive_clients_are_spread_over_two_fronts(start_server, linear_relu_program):
    server = start_server("--workers", "2")
    with server.client() as client:
        assert upload(client, "m", linear_relu_program.pte).status_code == 201
    x = np.ones((2, 4), np.float32)
    time.sleep(1)  # the fronts report their counts every half second
    before = _served(server)
    start = threading.Barrier(CLIENTS)

    def one_client() -> list[int]:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            start.wait()  # the connections are opened at once, as a pool's are
            return [
                client.post("/infer", json={"model": "m", "inputs": [tensor(x)]}).status_code
                for _ in range(REQUESTS)
            ]

    with ThreadPoolExecutor(CLIENTS) as pool:
        statuses = [s for done in pool.map(lambda _: one_client(), range(CLIENTS)) for s in done]
    assert statuses == [200] * (CLIENTS * REQUESTS)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        after = _served(server)
        gained = {f: after.get(f, 0) - before.get(f, 0) for f in after}
        if sum(gained.values()) >= CLIENTS * REQUESTS:
            break
        time.sleep(0.2)
    assert sum(gained.values()) >= CLIENTS * REQUESTS, gained
    # Each client's requests stay on its connection's front: 2 connections per front.
    assert sorted(gained.values()) == [2 * REQUESTS, 2 * REQUESTS], gained


def test_a_pool_opened_the_moment_the_server_is_ready_is_spread_over_every_front(
    start_server, linear_relu_program, tmp_path
):
    """Readiness waits for every front to listen (fair_accept.StartedFronts): a pool opened as
    soon as the server says ready otherwise kept only the fronts that had started (5 of 8 on
    the 16-core host). Here the fronts are often all up before the engine is; the gate itself is
    held by tests/unit/test_fair_accept.py."""
    fronts = 4
    artifacts = tmp_path / "artifacts"
    first = start_server(artifacts=artifacts)
    with first.client() as client:
        assert upload(client, "m", linear_relu_program.pte).status_code == 201
    first.stop()
    server = start_server("--workers", str(fronts), artifacts=artifacts)  # back when ready
    pool = [httpx.Client(base_url=server.url, timeout=60) for _ in range(2 * fronts)]
    x = np.ones((2, 4), np.float32)
    try:
        start = threading.Barrier(len(pool))

        def one_client(client) -> list[int]:
            start.wait()
            return [
                client.post("/infer", json={"model": "m", "inputs": [tensor(x)]}).status_code
                for _ in range(REQUESTS)
            ]

        with ThreadPoolExecutor(len(pool)) as threads:
            statuses = [s for done in threads.map(one_client, pool) for s in done]
    finally:
        for client in pool:
            client.close()
    assert statuses == [200] * (len(pool) * REQUESTS)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        served = _served(server)
        if sum(served.values()) >= len(pool) * REQUESTS:
            break
        time.sleep(0.2)
    # Every front holds connections of the pool, each front's requests those of its
    # connections. Two each as a rule; on cores too busy for a front to accept within
    # fair_accept.DEFER_S, a more loaded one takes the connection (measured: 3 / 2 / 2 / 1 in 1
    # of 5 runs beside a busy loop on one of 2 cores), so the count is not asserted exactly
    # here: test_four_keep_alive_clients_are_spread_over_two_fronts holds the spread.
    assert len(served) == fronts and sum(served.values()) == len(pool) * REQUESTS, served
    assert all(v >= REQUESTS and v % REQUESTS == 0 for v in served.values()), served
