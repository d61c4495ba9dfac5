"""TensorRT-delegated programs through a real server process, over HTTP.

This CPU host has neither TensorRT nor a CUDA device. With the default backend setup the server
must still start (the backend registers and the shipped provider is installed) and refuse such
uploads, or store them as not runnable when the operator allows unverified plans. With the test
engine provider standing in for TensorRT (support.test_backend_setup) the same programs are
verified at ingest and served end to end.
"""

import numpy as np
import pytest

from service.backends.tensorrt import runtime as tensorrt_runtime
from service.backends.tensorrt.checks import PLANNING_HINT, STRIPPED_HINT
from service.dataplane.signature import published_method
from service.ingest.inspection import inspect_data_file, inspect_program, method_meta
from support.program_fixtures import external_weights_program, linear_relu_program  # noqa: F401
from support.server import ServerProcess, registry_rows, stored_files, tensor, upload
from support.trt_program_fixtures import add_external, mixed_16, mixed_256  # noqa: F401

TEST_BACKEND = "support.test_backend_setup:install_test_backend"


def rewritten(source, target, **fields):
    # Imported here: rewriting uses executorch.exir, which the server process must never need.
    from support.trt_programs import with_plans_rewritten

    return with_plans_rewritten(source, target, **fields)


def delegates(description):
    return [d for m in description["methods"] for d in m["delegates"]]


def predict(client, model, program, seed=0):
    inputs = program.example_inputs(seed)
    return client.post("/infer", json={"model": model, "inputs": [tensor(x) for x in inputs]})


def assert_predicts(client, model, program, seed=0):
    response = predict(client, model, program, seed)
    assert response.status_code == 200, response.text
    [output] = response.json()["outputs"]
    [expected] = program.reference(*program.example_inputs(seed))
    assert output["shape"] == list(expected.shape)
    np.testing.assert_allclose(
        np.array(output["data"]).reshape(expected.shape), expected, rtol=1e-6
    )


# --- the default backend setup on this CPU host ---------------------------------------------------


def test_default_setup_refuses_tensorrt_programs_and_still_serves_cpu_ones(
    start_server, mixed_16, linear_relu_program
):
    server = start_server()
    available, reason = tensorrt_runtime.availability()
    assert not available  # this test is about a host without TensorRT or a CUDA device
    with server.client() as client:
        response = upload(client, "trt", mixed_16.pte)
        assert response.status_code == 422, response.text
        problems = response.json()["problems"]
        assert [p["rule"] for p in problems] == ["tensorrt.unverifiable"] * 2
        for index, problem in enumerate(problems):
            assert problem["file"] == "model.pte"
            assert problem["message"] == (
                f"method 'forward' delegate {index} (TensorRTBackend): this host cannot verify "
                f"TensorRT plans ({reason}); set ETRT_ALLOW_UNVERIFIED_PLANS=1 "
                f"(--allow-unverified-plans) to store the model anyway, not runnable here"
            )
        assert stored_files(server.artifacts) == ["registry.sqlite3"]
        assert registry_rows(server.artifacts) == []
        assert upload(client, "cpu", linear_relu_program.pte).status_code == 201
        x = np.ones((2, 4), dtype=np.float32)
        assert (
            client.post("/infer", json={"model": "cpu", "inputs": [tensor(x)]}).status_code == 200
        )


def test_unverified_plans_are_stored_not_runnable_across_a_restart(start_server, mixed_16):
    server = start_server("--allow-unverified-plans")
    _, reason = tensorrt_runtime.availability()
    unavailable = f"TensorRT plans cannot run on this host: {reason}"

    def check(client, description):
        assert description["state"] == "unavailable" and description["runnable"] is False
        assert description["unavailable_reason"] == unavailable
        assert sum("stored without verification" in w for w in description["warnings"]) == 2
        assert [d["details"]["verified"] for d in delegates(description)] == [False, False]
        [method] = description["methods"]
        assert [i["shape"] for i in method["inputs"]] == [[3, 5], [3, 5]]
        assert method["delegates"][0]["details"]["placement"]["expected_staging_copies_per_call"]
        response = predict(client, "trt", mixed_16)
        assert response.status_code == 503, response.text
        assert response.json()["error"] == f"model 'trt' is unavailable: {unavailable}"

    with server.client() as client:
        response = upload(client, "trt", mixed_16.pte)
        assert response.status_code == 201, response.text
        check(client, response.json())
        assert registry_rows(server.artifacts) == ["trt"]
    server.restart()
    with server.client() as client:
        [listed] = client.get("/models").json()
        check(client, listed)
        check(client, client.get("/models/trt").json())
        assert client.delete("/models/trt").status_code == 204
        assert client.get("/models").json() == []
    assert stored_files(server.artifacts) == ["registry.sqlite3"]


# --- the test engine provider standing in for TensorRT --------------------------------------------


@pytest.fixture(scope="module")
def trt_server(tmp_path_factory):
    server = ServerProcess(
        tmp_path_factory.mktemp("trt") / "artifacts", "--backend-setup", TEST_BACKEND
    ).start()
    yield server
    server.stop()


def refused(server, *args, **kwargs):
    """Uploads, expects 422 and that the artifacts root did not change; returns the problems."""
    before = stored_files(server.artifacts), registry_rows(server.artifacts)
    with server.client() as client:
        response = upload(client, *args, **kwargs)
    assert response.status_code == 422, response.text
    assert (stored_files(server.artifacts), registry_rows(server.artifacts)) == before
    return response.json()["problems"]


def test_inline_engines_are_verified_described_and_served(trt_server, mixed_16):
    with trt_server.client() as client:
        response = upload(client, "mixed16", mixed_16.pte)
        assert response.status_code == 201, response.text
        description = response.json()
        assert description["state"] == "ready" and description["runnable"] is True
        [method] = description["methods"]
        meta = method_meta(inspect_program(mixed_16.pte).methods[0])
        assert method["inputs"] == published_method(meta)["inputs"]
        # Triton's tools see a GPU model: its instance group is KIND_GPU.
        [group] = client.get("/v2/models/mixed16/config").json()["instance_group"]
        assert group["kind"] == "KIND_GPU"
        for delegate in method["delegates"]:
            details = delegate["details"]
            assert details["verified"] is True and details["engine_source"] == "inline"
            engine = details["engine"]
            assert {
                k: engine[k]
                for k in ("weight_bytes", "stripped_weights_size", "refittable", "device")
            } == {"weight_bytes": 0, "stripped_weights_size": -1, "refittable": False, "device": 0}
            assert [
                (b["name"], b["is_input"], b["dtype"], b["shape"]) for b in engine["bindings"]
            ] == [
                ("input0", True, "float32", [3, 5]),
                ("input1", True, "float32", [3, 5]),
                ("output0", False, "float32", [3, 5]),
            ]
        copies = [
            d["details"]["placement"]["expected_staging_copies_per_call"]
            for d in method["delegates"]
        ]
        assert sum(copies) > 0
        hints = [w for w in description["warnings"] if PLANNING_HINT in w]
        assert len(hints) == sum(c > 0 for c in copies)
        assert_predicts(client, "mixed16", mixed_16)
        assert_predicts(client, "mixed16", mixed_16, seed=1)


def test_256_byte_planning_needs_no_staging_copies(trt_server, mixed_256):
    with trt_server.client() as client:
        response = upload(client, "mixed256", mixed_256.pte)
        assert response.status_code == 201, response.text
        description = response.json()
        placements = [d["details"]["placement"] for d in delegates(description)]
        assert len(placements) == 2
        assert all(
            p["expected_staging_copies_per_call"] == 0 and "hint" not in p for p in placements
        )
        assert all(b["aligned"] for p in placements for b in p["buffers"])
        assert not any(PLANNING_HINT in w for w in description["warnings"])
        assert_predicts(client, "mixed256", mixed_256)


def test_an_engine_in_a_ptd_is_served_and_survives_a_restart(trt_server, add_external):
    [engines] = add_external.data_files
    [key] = inspect_data_file(engines).keys
    with trt_server.client() as client:
        response = upload(client, "external", add_external.pte, [engines])
        assert response.status_code == 201, response.text
        [delegate] = delegates(response.json())
        assert delegate["details"]["engine_source"] == {
            "data_file": engines.name,
            "engine_key": key,
        }
        assert not any("not used" in w for w in response.json()["warnings"])
        assert_predicts(client, "external", add_external)
    trt_server.restart()
    with trt_server.client() as client:
        assert client.get("/models/external").json()["state"] == "ready"
        assert_predicts(client, "external", add_external, seed=2)


def test_a_ptd_without_the_engine_key_is_refused_naming_it(
    trt_server, add_external, external_weights_program
):
    [key] = inspect_data_file(add_external.data_files[0]).keys
    [problem] = refused(trt_server, "nokey", add_external.pte, external_weights_program.ptds)
    assert problem["rule"] == "tensorrt.engine_key_missing"
    assert problem["message"].startswith(
        f"method 'forward' delegate 0 (TensorRTBackend) needs engine_key {key!r}, which none of "
        f"the uploaded .ptd files contains"
    )


def test_a_stripped_plan_is_refused(trt_server, mixed_16, tmp_path):
    stripped = rewritten(
        mixed_16.pte,
        tmp_path / "stripped.pte",
        stats={"stripped_weights_size": 0, "total_weights_size": 4096},
    )
    problems = refused(trt_server, "stripped", stripped)
    assert [p["rule"] for p in problems] == ["tensorrt.weights_stripped"] * 2
    assert all(
        f"the TensorRT plan was {STRIPPED_HINT} (the plan holds 0 of its 4096 weight "
        f"bytes)" in p["message"]
        for p in problems
    )
    assert STRIPPED_HINT == "saved without its weights; re-export with strip_engine_weights=False"


def test_a_damaged_alias_is_refused_naming_file_method_and_binding(trt_server, mixed_16, tmp_path):
    damaged = rewritten(
        mixed_16.pte,
        tmp_path / "damaged.pte",
        blob_fields={"aliased_io": [{"output": "output0", "input": "input0", "kind": "bogus"}]},
    )
    problems = refused(trt_server, "damaged", damaged)
    assert [p["rule"] for p in problems] == ["tensorrt.alias_kind"] * 2
    assert problems[0]["file"] == "model.pte"
    assert problems[0]["message"].startswith(
        "'model.pte' method 'forward' delegate 0 (TensorRTBackend) (binding 'output0'): "
    )


def test_an_engine_with_a_shape_tensor_input_is_refused_naming_it(trt_server, mixed_16, tmp_path):
    shapes = rewritten(
        mixed_16.pte, tmp_path / "shapes.pte", io_fields={"input1": {"shape_tensor": True}}
    )
    problems = refused(trt_server, "shapes", shapes)
    assert [p["rule"] for p in problems] == ["tensorrt.shape_tensor_input"] * 2
    assert "binding 'input1' is a shape-tensor input" in problems[0]["message"]


def test_a_plan_holding_all_its_weights_passes_with_its_stats(trt_server, mixed_16, tmp_path):
    kept = rewritten(
        mixed_16.pte,
        tmp_path / "kept.pte",
        stats={
            "stripped_weights_size": 4096,
            "total_weights_size": 4096,
            "refittable": True,
            "device_memory_size": 512,
        },
    )
    with trt_server.client() as client:
        response = upload(client, "kept", kept)
        assert response.status_code == 201, response.text
        for delegate in delegates(response.json()):
            engine = delegate["details"]["engine"]
            assert (
                engine["weight_bytes"],
                engine["stripped_weights_size"],
                engine["refittable"],
                engine["device_memory_size"],
            ) == (4096, 4096, True, 512)
        assert_predicts(client, "kept", mixed_16)


def test_a_plan_that_crashes_its_deserializer_is_refused_and_the_server_lives_on(
    trt_server, mixed_16, linear_relu_program, tmp_path
):
    crashing = rewritten(mixed_16.pte, tmp_path / "crash.pte", test_abort_on_deserialize=True)
    problems = refused(trt_server, "crash", crashing)
    # Both delegates' plans crash; the second is verified in a fresh child after the first.
    assert [p["rule"] for p in problems] == ["delegate.check_crashed"] * 2
    for index, problem in enumerate(problems):
        assert problem["message"].startswith(
            f"method 'forward' delegate {index} (TensorRTBackend): the isolated process "
            f"deserializing the TensorRT plan was killed by signal SIGABRT"
        )
        assert "aborting in deserialize on purpose" in problem["message"]
    with trt_server.client() as client:
        assert client.get("/health/live").status_code == 200
        assert client.get("/models/crash").status_code == 404
        assert upload(client, "after_crash", linear_relu_program.pte).status_code == 201
        x = np.ones((2, 4), dtype=np.float32)
        assert (
            client.post("/infer", json={"model": "after_crash", "inputs": [tensor(x)]}).status_code
            == 200
        )
        assert upload(client, "mixed_after_crash", mixed_16.pte).status_code == 201
        assert_predicts(client, "mixed_after_crash", mixed_16)
