"""The TensorRT delegate's knobs as model configuration, and GPU memory admission, through a real
server process with the test engine provider on a host-memory stand-in GPU of a fixed size.

Knobs are Triton `parameters` (service/model_config/parameters.py): validated at ingest, shown in
the description and in Triton's get_model_config (unmodified tritonclient), and passed to the
delegate at load (the test provider records the budget it was given; the description reports
what each engine runs with). Admission: a model whose engines need more device memory than is
free is refused with 507 naming both figures, and nothing of it is stored.
"""

import json

import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http

from support.prometheus import parse, value
from support.server import ServerProcess, registry_rows, upload
from support.trt_program_fixtures import mixed_256  # noqa: F401

MiB = 1 << 20
DEVICE_BYTES = 64 * MiB
STATS = {
    "stripped_weights_size": -1,
    "total_weights_size": 8 * MiB,
    "streamable_weights_size": 6 * MiB,
    "device_memory_size": 1 * MiB,
}


def params(**values):
    return {"parameters": {k: {"string_value": v} for k, v in values.items()}}


def config(**values):
    return {"instance_group": [{"count": 1}], **params(**values)}


@pytest.fixture(scope="module")
def weighted(mixed_256, tmp_path_factory):
    """mixed_256 whose plans report weights (6 of 8 MiB streamable) and 1 MiB of context memory:
    the test provider then holds that much of the stand-in device per engine and context."""
    from support.trt_programs import with_plans_rewritten

    return with_plans_rewritten(
        mixed_256.pte, tmp_path_factory.mktemp("knobs") / "weighted.pte", stats=STATS
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = ServerProcess(
        tmp_path_factory.mktemp("knobs") / "artifacts",
        "--backend-setup",
        "support.test_backend_setup:install_test_backend_sized_device",
        env={"ETRT_TEST_DEVICE_BYTES": str(DEVICE_BYTES)},
    ).start()
    yield server
    server.stop()


def deploy(client, name, program, configuration):
    return upload(client, name, program, fields={"config": json.dumps(configuration)})


def test_bad_knobs_are_refused_at_ingest_naming_each(server, weighted):
    bad = {
        "parameters": {
            "weight_streaming_budget": {"string_value": "-5"},
            "use_cuda_graphs": {"string_value": "yes"},
            "use_shared_engine": {"string_value": "true"},
            "use_shared_engines": "false",
        }
    }
    with server.client() as client:
        response = deploy(client, "bad", weighted, bad)
    assert response.status_code == 422, response.text
    problems = {(p["rule"], p["message"]) for p in response.json()["problems"]}
    assert {rule for rule, _ in problems} == {
        "config.parameter",
        "config.unknown_key",
        "config.type",
    }
    messages = " | ".join(message for _, message in problems)
    assert "parameters.weight_streaming_budget must be a byte count" in messages
    assert 'parameters.use_cuda_graphs must be "true" or "false", not "yes"' in messages
    assert "unknown key 'parameters.use_shared_engine'" in messages
    assert 'parameters.use_shared_engines must be {"string_value": "..."}' in messages
    assert "bad" not in registry_rows(server.artifacts)


def test_knobs_reach_the_delegate_and_show_in_description_and_triton_config(server, weighted):
    knobs = config(
        weight_streaming_budget="0.5", use_cuda_graphs="true", use_shared_engines="false"
    )
    with server.client() as client:
        response = deploy(client, "knobs", weighted, knobs)
        assert response.status_code == 201, response.text
        description = client.get("/models/knobs").json()
    assert description["config"]["parameters"] == knobs["parameters"]
    device = description["device_memory"]
    engines = device["engines"]
    assert len(engines) == 2  # the program's two TensorRT delegates, one instance
    for engine in engines:
        assert engine["shared_engines"] is False
        assert engine["streamable_weights_bytes"] == 6 * MiB
        assert engine["weight_streaming_budget"] == 3 * MiB  # half of the streamable weights
        assert engine["resident_weights_bytes"] == 2 * MiB + 3 * MiB
        assert engine["context_bytes"] == 1 * MiB
        graphs = engine["cuda_graphs"]
        assert (graphs["requested"], graphs["replaying"]) == (True, False)
        assert graphs["reason"] == "host memory has no CUDA graphs"
    # Not shared: each delegate has its own engine, with its own weights.
    assert len({e["engine_id"] for e in engines}) == 2
    assert device["weights_bytes"] == 2 * 5 * MiB
    assert device["contexts_bytes"] == 2 * MiB
    assert device["device_bytes"] == 12 * MiB

    with triton_http.InferenceServerClient(server.url.removeprefix("http://")) as http:
        assert http.get_model_config("knobs")["parameters"] == knobs["parameters"]
    with triton_grpc.InferenceServerClient(server.grpc_url) as grpc:
        message = grpc.get_model_config("knobs").config
        assert {k: v.string_value for k, v in message.parameters.items()} == {
            "weight_streaming_budget": "0.5",
            "use_cuda_graphs": "true",
            "use_shared_engines": "false",
        }
    with server.client() as client:
        assert client.delete("/models/knobs").status_code in (200, 204)


def test_two_models_with_the_same_plans_share_one_engine_per_plan(server, weighted):
    with server.client() as client:
        for name in ("first", "second"):
            response = deploy(client, name, weighted, config())
            assert response.status_code == 201, response.text
        first = client.get("/models/first").json()["device_memory"]
        second = client.get("/models/second").json()["device_memory"]
        metrics = client.get("/metrics").text
    ids = {e["engine_id"] for e in first["engines"]}
    assert ids == {e["engine_id"] for e in second["engines"]}
    for engine in first["engines"] + second["engines"]:
        assert engine["shared_engines"] is True
        assert engine["weight_streaming_budget"] == -1  # no budget: all weights resident
        # Both models' delegates hold it (the two delegates of a program may share one too).
        assert engine["engine_holders"] == 4 // len(ids)
    assert first["weights_bytes"] == len(ids) * 8 * MiB
    parsed = parse(metrics)
    name = "etrt_model_tensorrt_device_bytes"
    assert value(parsed, name, model="second", memory="weights") == len(ids) * 8 * MiB
    assert value(parsed, name, model="second", memory="contexts") == 2 * MiB
    with server.client() as client:
        for name in ("first", "second"):
            assert client.delete(f"/models/{name}").status_code in (200, 204)


def test_a_model_that_does_not_fit_is_refused_with_507_naming_the_figures(server, mixed_256):
    from support.trt_programs import with_plans_rewritten

    huge = with_plans_rewritten(
        mixed_256.pte,
        server.artifacts.parent / "huge.pte",
        stats={**STATS, "total_weights_size": 2 * DEVICE_BYTES, "streamable_weights_size": 0},
    )
    with server.client() as client:
        response = deploy(client, "huge", huge, config())
        assert response.status_code == 507, response.text
        body = response.json()
        [problem] = body["problems"]
        assert problem["rule"] == "load.device_memory"
        assert "model 'huge' needs " in body["error"]
        needed = int(body["error"].split(" needs ")[1].split(" bytes")[0])
        assert needed >= 2 * DEVICE_BYTES
        assert f"of the device's {DEVICE_BYTES} bytes are free" in body["error"]
        assert client.get("/models/huge").status_code == 404
        # A budget that keeps only the non-streamable part on the device lets it in.
        fits = with_plans_rewritten(
            mixed_256.pte,
            server.artifacts.parent / "fits.pte",
            stats={
                **STATS,
                "total_weights_size": 2 * DEVICE_BYTES,
                "streamable_weights_size": 2 * DEVICE_BYTES - 4 * MiB,
            },
        )
        response = deploy(client, "fits", fits, config(weight_streaming_budget="0"))
        assert response.status_code == 201, response.text
        assert client.get("/models/fits").json()["device_memory"]["weights_bytes"] <= 8 * MiB
