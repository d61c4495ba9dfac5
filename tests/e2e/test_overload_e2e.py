"""Overload from every protocol at once: one bounded queue per model method, shared by native
JSON `/infer`, v2 REST JSON, v2 REST binary and gRPC, admits each protocol's requests (none
starves the others), refuses the rest with 503 / UNAVAILABLE and never a server error, and names
a Retry-After taken from the queue's drain time.

The flood's clients run on the same 2 busy cores as the server, so every figure here is a ratio
with a wide margin, never a duration."""

import json
import math

import numpy as np
import pytest

from support import programs
from support.flood import PROTOCOLS, flood
from support.server import upload

WIDTH, LAYERS = 2048, 4  # about 10 ms per execute alone, several times that under the flood
CONNECTIONS = 16  # per protocol: 64 in all, well past the queue and the instance
MAX_QUEUE = 40
SECONDS = 6.0


@pytest.fixture(scope="module")
def weight_bound(programs_dir):
    return programs.export_weight_bound(programs_dir, WIDTH, LAYERS)


def test_a_mixed_flood_is_served_fairly_and_refused_with_a_drain_time(start_server, weight_bound):
    server = start_server("--workers", "1")
    config = {
        "dynamic_batching": {"default_queue_policy": {"max_queue_size": MAX_QUEUE}},
        "instance_group": [{"count": 1}],
    }
    with server.client() as client:
        created = upload(
            client,
            "flood",
            weight_bound.pte,
            weight_bound.ptds,
            fields={"config": json.dumps(config)},
        )
        assert created.status_code == 201, created.text
    x = np.random.default_rng(0).standard_normal((1, WIDTH)).astype(np.float32)
    outcomes = flood(server.port, server.grpc_url, "flood", x, SECONDS, CONNECTIONS)
    served = sum(o.ok for o in outcomes.values())
    assert served > 0, outcomes
    for protocol in PROTOCOLS:
        outcome = outcomes[protocol]
        # A fair share is a quarter; a protocol that a side path starved got 1 % (issue 20).
        assert outcome.ok > 0.1 * served, {p: o.ok for p, o in outcomes.items()}
        assert outcome.refused > 0, f"{protocol} was never refused: the flood did not overload"
        assert outcome.other == {}, f"{protocol}: answers other than 200 and 503: {outcome.other}"
    # Every HTTP refusal says when to come back, in whole seconds, at least 1, from the queue's
    # drain time: about MAX_QUEUE requests ahead, each taking what the flood's requests took.
    retries = [r for o in outcomes.values() for r in o.retry_after_s]
    assert retries and all(r >= 1 and r == math.floor(r) for r in retries), set(retries)
    drain_s = MAX_QUEUE * SECONDS / served
    median = float(np.median(retries))
    assert 0.5 * drain_s <= median <= 2.0 * drain_s + 1, (median, drain_s)
