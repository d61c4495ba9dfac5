"""What the dynamic batching e2e modules share: a configuration as an upload's field, requests
started together, a model's executes as /metrics counts them, and the check that every request
got the answer its program gives its own rows alone."""

from __future__ import annotations

import json
import threading

import numpy as np
import torch

from support import programs
from support.prometheus import parse, value
from support.server import tensor

# The lookup program batched: one instance, a delay long enough for every request to join.
LOOKUP_BATCHING = {
    "max_batch_size": programs.LOOKUP_MAX_BATCH,
    "dynamic_batching": {"max_queue_delay_microseconds": 300_000},
    "instance_group": [{"count": 1}],
}
REFUSED = 5  # the lookup request whose index is past the table


def lookups_with_one_refused(server, module) -> list:
    """12 concurrent lookups of model "lookup", one past the 10-row table: that one alone is
    refused (422 naming the index and the kernel), the others get their own answers; the
    responses."""
    rng = np.random.default_rng(11)
    ids = [rng.integers(0, programs.LOOKUP_TABLE, (1, 3)).astype(np.int64) for _ in range(12)]
    ids[REFUSED] = np.array([[1, 42, 3]], np.int64)

    def call(index):
        with server.client() as client:
            return client.post("/infer", json={"model": "lookup", "inputs": [tensor(ids[index])]})

    responses = concurrently(len(ids), call)
    bad = responses[REFUSED]
    assert bad.status_code == 422, bad.text
    [problem] = bad.json()["problems"]
    assert problem["rule"] == "input.rejected" and "42" in problem["message"], problem
    assert "embedding" in problem["message"]
    assert_unbatched_answers(module, ids, responses, skip={REFUSED})
    return responses


def configured(config: dict) -> dict:
    return {"config": json.dumps(config)}


def concurrently(count: int, call) -> list:
    """call(i) for i < count, each in its own thread, all started before any is awaited."""
    results = [None] * count
    threads = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, call(i))) for i in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def executions(client, model: str) -> float:
    """Executes of the model so far, from its batch-size histogram."""
    parsed = parse(client.get("/metrics").text)
    return value(parsed, "etrt_batch_size_count", model=model, method="forward") or 0


def assert_unbatched_answers(module, inputs: list, responses: list, skip=()) -> None:
    """Each native /infer response (but those at `skip`) is 200 with what `module` computes
    from that request's inputs alone."""
    for index, (x, response) in enumerate(zip(inputs, responses, strict=True)):
        if index in skip:
            continue
        assert response.status_code == 200, response.text
        [output] = response.json()["outputs"]
        expected = module(torch.from_numpy(x)).detach().numpy()
        assert output["shape"] == list(expected.shape)
        np.testing.assert_allclose(
            np.array(output["data"], np.float32).reshape(output["shape"]),
            expected,
            rtol=1e-5,
            atol=1e-6,
        )
