"""model_warmup on a real server: warmed before READY (time in the description), refused at
ingest when it does not fit the method, and a warmup that fails leaves the model unavailable
with the reason."""

import json

import numpy as np
import pytest
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from support import programs
from support.program_fixtures import dynamic_batch_program, dynamic_lookup_program  # noqa: F401
from support.prometheus import parse, series, value
from support.server import tensor, upload


def zero(dims, data_type="TYPE_FP32"):
    return {"data_type": data_type, "dims": dims, "zero_data": True}


def configured(config):
    return {"config": json.dumps(config)}


def test_a_model_serves_warmed_and_shows_its_warmup(start_server, dynamic_batch_program):
    server = start_server()
    samples = [
        {"name": "rows", "batch_size": 4, "inputs": {"input_0": zero([4])}, "count": 2},
        {
            "name": "noise",
            "batch_size": 1,
            "inputs": {"input_0": {"data_type": "TYPE_FP32", "dims": [4], "random_data": True}},
        },
    ]
    config = {"max_batch_size": 8, "dynamic_batching": {}, "model_warmup": samples}
    with server.client() as client:
        created = upload(client, "warm", dynamic_batch_program.pte, fields=configured(config))
        assert created.status_code == 201, created.text
        description = created.json()
        assert description["state"] == "ready" and description["warmup_s"] > 0
        assert [w["name"] for w in description["config"]["model_warmup"]] == ["rows", "noise"]
        x = np.ones((2, 4), np.float32)
        assert client.post("/infer", json={"model": "warm", "inputs": [tensor(x)]}).is_success
    with triton_http.InferenceServerClient(server.url.removeprefix("http://")) as triton:
        listed = triton.get_model_config("warm")["model_warmup"]
        assert listed[0] == {**samples[0], "inputs": {"input_0": zero([4])}}
        assert listed[1]["count"] == 0 and listed[1]["inputs"]["input_0"]["random_data"] is True
    with server.client() as client:  # the same seconds in /metrics, per model version
        scraped = parse(client.get("/metrics").text)
        seconds = value(scraped, "etrt_model_warmup_seconds", model="warm", version="1")
        assert seconds == pytest.approx(description["warmup_s"])
    server.restart()  # stored models are warmed again before they serve
    with server.client() as client:
        again = client.get("/models/warm").json()
        assert again["state"] == "ready" and again["warmup_s"] > 0
        scraped = parse(client.get("/metrics").text)
        assert value(scraped, "etrt_model_warmup_seconds", model="warm", version="1") == (
            pytest.approx(again["warmup_s"])
        )
        # A model without warmups has no sample; a deleted one loses its sample.
        assert upload(client, "cold", dynamic_batch_program.pte).status_code == 201
        assert client.delete("/models/warm").status_code == 204
        scraped = parse(client.get("/metrics").text)
        assert series(scraped, "etrt_model_warmup_seconds") == {}


def test_a_warmup_that_does_not_fit_is_refused_naming_it_and_its_input(
    start_server, dynamic_batch_program
):
    server = start_server()
    config = {
        "max_batch_size": 8,
        "model_warmup": [{"name": "wide", "batch_size": 2, "inputs": {"input_0": zero([5])}}],
    }
    with server.client() as client:
        refused = upload(client, "w", dynamic_batch_program.pte, fields=configured(config))
        assert refused.status_code == 422, refused.text
        [problem] = refused.json()["problems"]
        assert problem["rule"] == "config.warmup"
        assert "warmup 'wide' input 'input_0' has the shape [2, 5]" in problem["message"]
        assert client.get("/models").json() == []
    files = {"file:1/model.pte": dynamic_batch_program.pte.read_bytes()}
    with triton_http.InferenceServerClient(server.url.removeprefix("http://")) as triton:
        with pytest.raises(InferenceServerException) as caught:
            triton.load_model("w", config=json.dumps(config), files=files)
    assert "config.warmup: warmup 'wide' input 'input_0'" in caught.value.message()


def test_a_warmup_that_fails_leaves_the_model_unavailable_with_the_reason(
    start_server, dynamic_lookup_program
):
    server = start_server()
    # Random int64 ids span the whole type: past the 10-row table, the kernel refuses them.
    ids = {"data_type": "TYPE_INT64", "dims": [3], "random_data": True}
    config = {
        "max_batch_size": programs.LOOKUP_MAX_BATCH,
        "model_warmup": [{"name": "random ids", "batch_size": 2, "inputs": {"input_0": ids}}],
    }
    with server.client() as client:
        created = upload(client, "cold", dynamic_lookup_program.pte, fields=configured(config))
        assert created.status_code == 201, created.text
        description = created.json()
        assert description["state"] == "unavailable"
        assert "warmup 'random ids' failed" in description["error"], description
        assert "embedding" in description["error"] and ".cpp" not in description["error"]
        ids_ok = np.array([[1, 2, 3]], np.int64)
        answer = client.post("/infer", json={"model": "cold", "inputs": [tensor(ids_ok)]})
        assert answer.status_code == 503 and "warmup 'random ids' failed" in answer.text
    with triton_http.InferenceServerClient(server.url.removeprefix("http://")) as triton:
        assert not triton.is_model_ready("cold")
        [entry] = triton.get_model_repository_index()
        assert entry["state"] == "UNAVAILABLE" and "warmup 'random ids'" in entry["reason"]
