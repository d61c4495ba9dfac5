"""What the dynamic batching e2e modules share: a configuration as an upload's field, requests
started together, a model's executes as /metrics counts them, and the check that every request
got the answer its program gives its own rows alone."""

from __future__ import annotations

import json
import threading

import numpy as np
import torch

from support.prometheus import parse, value


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
