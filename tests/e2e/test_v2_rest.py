"""The Open Inference Protocol over REST, driven by the real, unmodified tritonclient.http against a
real server process: health, metadata, JSON and binary inference, output selection, methods, the
repository and statistics extensions, and errors as the client reports them."""

import json

import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from support import programs
from support.program_fixtures import (
    dynamic_batch_program,
    external_weights_program,  # noqa: F401
    linear_relu_program,
    mix_of_ops_program,
    two_methods_program,
)
from support.server import registry_rows, stored_files, upload


@pytest.fixture(scope="module")
def client(shared_server):
    with triton.InferenceServerClient(shared_server.url.removeprefix("http://")) as c:
        yield c


def deploy(server, name, exported):
    with server.client() as http:
        response = upload(http, name, exported.pte, exported.ptds)
        assert response.status_code == 201, response.text


def tensor_input(name, array, binary_data):
    item = triton.InferInput(name, list(array.shape), _datatype(array))
    item.set_data_from_numpy(array, binary_data=binary_data)
    return item


def _datatype(array):
    from tritonclient.utils import np_to_triton_dtype

    return np_to_triton_dtype(array.dtype)


def test_server_health_and_metadata(client):
    assert client.is_server_live() and client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "etrt-server" and meta["version"]
    assert {"binary_tensor_data", "model_repository", "statistics"} <= set(meta["extensions"])
    assert meta["executorch_version"] == "1.5.1"


def test_model_metadata_names_every_tensor(
    shared_server, client, mix_of_ops_program, dynamic_batch_program
):
    deploy(shared_server, "mix", mix_of_ops_program)
    deploy(shared_server, "dynamic", dynamic_batch_program)
    meta = client.get_model_metadata("mix")
    assert meta["name"] == "mix" and meta["versions"] == ["1"] and meta["platform"] == "executorch"
    assert meta["inputs"] == [
        {"name": "input_0", "datatype": "FP32", "shape": [3, 8]},
        {"name": "input_1", "datatype": "INT64", "shape": [3]},
    ]
    assert [o["name"] for o in meta["outputs"]] == ["output_0", "output_1"]
    assert client.get_model_metadata("mix", "1") == meta
    dynamic = client.get_model_metadata("dynamic")
    assert dynamic["inputs"][0]["shape"] == [-1, -1]
    assert client.is_model_ready("mix") and client.is_model_ready("mix", "1")
    assert not client.is_model_ready("mix", "2") and not client.is_model_ready("nope")


@pytest.mark.parametrize(
    "binary_in,binary_out", [(False, False), (True, True), (True, False), (False, True)]
)
def test_infer_json_and_binary_both_ways(
    shared_server, client, mix_of_ops_program, binary_in, binary_out
):
    deploy_once(shared_server, "mix", mix_of_ops_program)
    x, idx = mix_of_ops_program.example_inputs
    inputs = [
        tensor_input("input_0", x.numpy(), binary_in),
        tensor_input("input_1", idx.numpy(), binary_in),
    ]
    outputs = [
        triton.InferRequestedOutput(n, binary_data=binary_out) for n in ("output_0", "output_1")
    ]
    result = client.infer("mix", inputs, outputs=outputs, request_id="req-7")
    expected = mix_of_ops_program.module(x, idx)
    body = result.get_response()
    assert body["model_name"] == "mix" and body["model_version"] == "1" and body["id"] == "req-7"
    for name, want in zip(("output_0", "output_1"), expected):
        np.testing.assert_allclose(
            result.as_numpy(name), want.detach().numpy(), rtol=1e-5, atol=1e-6
        )
        assert ("parameters" in result.get_output(name)) == binary_out


def deploy_once(server, name, exported):
    with server.client() as http:
        if http.get(f"/models/{name}").status_code == 404:
            deploy(server, name, exported)


def test_default_outputs_are_all_and_binary_with_the_client_defaults(
    shared_server, client, mix_of_ops_program
):
    deploy_once(shared_server, "mix", mix_of_ops_program)
    x, idx = mix_of_ops_program.example_inputs
    result = client.infer(
        "mix",
        [tensor_input("input_0", x.numpy(), True), tensor_input("input_1", idx.numpy(), True)],
    )
    assert [o["name"] for o in result.get_response()["outputs"]] == ["output_0", "output_1"]
    assert all(o["parameters"]["binary_data_size"] > 0 for o in result.get_response()["outputs"])


def test_output_selection_in_the_order_asked(shared_server, client, mix_of_ops_program):
    deploy_once(shared_server, "mix", mix_of_ops_program)
    x, idx = mix_of_ops_program.example_inputs
    result = client.infer(
        "mix",
        [tensor_input("input_0", x.numpy(), False), tensor_input("input_1", idx.numpy(), False)],
        outputs=[triton.InferRequestedOutput("output_1", binary_data=False)],
    )
    assert [o["name"] for o in result.get_response()["outputs"]] == ["output_1"]
    np.testing.assert_allclose(
        result.as_numpy("output_1"),
        mix_of_ops_program.module(x, idx)[1].detach().numpy(),
        rtol=1e-5,
    )


def test_method_parameter_runs_another_method(shared_server, client, two_methods_program):
    deploy(shared_server, "two", two_methods_program)
    meta = client.get_model_metadata("two")
    assert set(meta["methods"]) == {"forward", "triple"}
    x = two_methods_program.example_inputs[0].numpy()
    triple = client.infer(
        "two", [tensor_input("input_0", x, True)], parameters={"method": "triple"}
    )
    np.testing.assert_allclose(triple.as_numpy("output_0"), x * 3 + 1, rtol=1e-6)
    assert triple.get_response()["parameters"] == {"method": "triple"}
    forward = client.infer("two", [tensor_input("input_0", x, True)])
    np.testing.assert_allclose(forward.as_numpy("output_0"), x * 2 + 1, rtol=1e-6)


def raises(call, status: str, *words) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    error = caught.value
    assert error.status() == status, error
    for word in words:
        assert word in error.message(), error.message()
    return error


def test_errors_reach_the_client_with_our_message(shared_server, client, linear_relu_program):
    deploy(shared_server, "linear", linear_relu_program)
    good = np.zeros((2, 4), np.float32)
    raises(lambda: client.get_model_metadata("nope"), "404", "model 'nope' not found")
    raises(lambda: client.get_model_metadata("linear", "3"), "404", "'linear' has no version 3")
    raises(lambda: client.infer("nope", [tensor_input("input_0", good, True)]), "404", "not found")
    raises(
        lambda: client.infer(
            "linear", [tensor_input("input_0", np.zeros((3, 4), np.float32), True)]
        ),
        "400",
        "input_0",
        "shape",
    )
    raises(
        lambda: client.infer("linear", [tensor_input("x", good, False)]),
        "400",
        "unknown input 'x'",
        "input_0",
    )
    raises(
        lambda: client.infer("linear", [tensor_input("input_0", good.astype(np.float64), True)]),
        "400",
        "FP32",
    )
    raises(
        lambda: client.infer(
            "linear",
            [tensor_input("input_0", good, True)],
            outputs=[triton.InferRequestedOutput("nope")],
        ),
        "400",
        "unknown output 'nope'",
    )
    raises(
        lambda: client.infer(
            "linear", [tensor_input("input_0", good, True)], parameters={"method": "missing"}
        ),
        "404",
        "no method 'missing'",
    )


def test_repository_load_with_files_unload_and_index(
    shared_server, client, external_weights_program
):
    exported = external_weights_program
    files = {"file:1/model.pte": exported.pte.read_bytes()}
    files.update({f"file:1/{p.name}": p.read_bytes() for p in exported.ptds})
    client.load_model("repo", config=json.dumps({}), files=files)
    assert client.is_model_ready("repo")
    x = exported.example_inputs[0]
    result = client.infer("repo", [tensor_input("input_0", x.numpy(), True)])
    np.testing.assert_allclose(
        result.as_numpy("output_0"), exported.module(x).detach().numpy(), rtol=1e-5, atol=1e-6
    )
    index = {e["name"]: e for e in client.get_model_repository_index()}
    assert index["repo"]["state"] == "READY" and index["repo"]["version"] == "1"
    client.unload_model("repo")
    assert not client.is_model_ready("repo")
    index = {e["name"]: e for e in client.get_model_repository_index()}
    assert index["repo"]["state"] == "UNAVAILABLE" and index["repo"]["reason"]
    raises(lambda: client.infer("repo", [tensor_input("input_0", x.numpy(), True)]), "503")
    client.load_model("repo")
    assert client.is_model_ready("repo")


def test_refused_repository_load_names_the_rule_and_leaves_nothing(
    shared_server, client, external_weights_program
):
    before_files = stored_files(shared_server.artifacts)
    before_rows = registry_rows(shared_server.artifacts)
    before_index = client.get_model_repository_index()
    # The program without the .ptd holding its weights.
    files = {"file:1/model.pte": external_weights_program.pte.read_bytes()}
    # The client shows the error string only: it carries the rule and the reason.
    error = raises(
        lambda: client.load_model("weightless", files=files),
        "400",
        "upload refused: external.missing_key: method 'forward' needs external data",
    )
    with shared_server.client() as http:
        body = http.post(
            "/v2/repository/models/weightless/load",
            json={
                "parameters": {
                    k: __import__("base64").b64encode(v).decode() for k, v in files.items()
                }
            },
        ).json()
    assert "external.missing_key" in {p["rule"] for p in body["problems"]}, (error, body)
    raises(lambda: client.load_model("weightless", files={"file:1/notes.txt": b"x"}), "400")
    raises(lambda: client.load_model("weightless", files={"file:2/model.pte": b"x"}), "400")
    assert stored_files(shared_server.artifacts) == before_files
    assert registry_rows(shared_server.artifacts) == before_rows
    assert client.get_model_repository_index() == before_index
    raises(lambda: client.load_model("never-stored"), "404", "not found")
    raises(lambda: client.unload_model("never-stored"), "404", "not found")


def test_statistics_count_successes_failures_and_phases(shared_server, client, linear_relu_program):
    with shared_server.client() as http:
        upload(http, "counted", linear_relu_program.pte, replace=True)
    before = client.get_inference_statistics("counted")["model_stats"][0]
    good = np.ones((2, 4), np.float32)
    for _ in range(3):
        client.infer("counted", [tensor_input("input_0", good, True)])
    raises(
        lambda: client.infer(
            "counted", [tensor_input("input_0", np.ones((1, 4), np.float32), True)]
        ),
        "400",
    )
    stats = client.get_inference_statistics("counted")
    [model] = stats["model_stats"]
    assert model["name"] == "counted" and model["version"] == "1"
    assert model["inference_count"] - before["inference_count"] == 3
    assert model["execution_count"] - before["execution_count"] == 3
    phases = model["inference_stats"]
    assert phases["success"]["count"] - before["inference_stats"]["success"]["count"] == 3
    assert phases["fail"]["count"] - before["inference_stats"]["fail"]["count"] == 1
    for phase in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert phases[phase]["ns"] > before["inference_stats"][phase]["ns"], phase
    assert model["last_inference"] > 0
    # An unbatched model executes each request alone, as batch size 1.
    [ones] = model["batch_stats"]
    earlier = {b["batch_size"]: b["compute_infer"]["count"] for b in before["batch_stats"]}
    assert ones["batch_size"] == 1 and ones["compute_infer"]["count"] - earlier.get(1, 0) == 3
    every = client.get_inference_statistics()["model_stats"]
    assert "counted" in {m["name"] for m in every}
    assert client.get_inference_statistics("counted", "1") == stats
    raises(lambda: client.get_inference_statistics("counted", "9"), "404")
    with shared_server.client() as http:
        assert http.delete("/models/counted").status_code == 204
    raises(lambda: client.get_inference_statistics("counted"), "404")
    assert "counted" not in {m["name"] for m in client.get_inference_statistics()["model_stats"]}


@pytest.fixture(scope="module")
def same_dtype_programs(programs_dir):
    return {dt: programs.export_same_dtype(programs_dir, dt) for dt in programs.HOST_DATATYPES}


@pytest.mark.parametrize("datatype", list(programs.HOST_DATATYPES))
def test_every_host_datatype_round_trips(shared_server, client, same_dtype_programs, datatype):
    exported = same_dtype_programs[datatype]
    name = f"dtype-{datatype.lower()}"
    deploy_once(shared_server, name, exported)
    meta = client.get_model_metadata(name)
    assert meta["inputs"][0]["datatype"] == datatype == meta["outputs"][0]["datatype"]
    x = exported.example_inputs[0]
    want = exported.module(x).numpy()
    for binary in (True, False):
        result = client.infer(
            name,
            [tensor_input("input_0", x.numpy(), binary)],
            outputs=[triton.InferRequestedOutput("output_0", binary_data=binary)],
        )
        got = result.as_numpy("output_0")
        assert got.dtype == want.dtype and result.get_output("output_0")["datatype"] == datatype
        np.testing.assert_array_equal(got, want)


def test_bf16_round_trips_as_binary_v2_and_native_json(shared_server, client, programs_dir):
    """BF16 crosses the host as uint16 bit patterns; clients see bfloat16 values both ways."""
    exported = programs.export_same_dtype(programs_dir, "BF16")
    deploy_once(shared_server, "dtype-bf16", exported)
    x = exported.example_inputs[0]
    want = exported.module(x).float().numpy()
    sent = triton.InferInput("input_0", [2, 3], "BF16")
    import ml_dtypes  # tritonclient's own bfloat16 for numpy (a dependency of tritonclient)

    sent.set_data_from_numpy(x.float().numpy().astype(ml_dtypes.bfloat16), binary_data=True)
    result = client.infer(
        "dtype-bf16", [sent], outputs=[triton.InferRequestedOutput("output_0", binary_data=True)]
    )
    assert result.get_output("output_0")["datatype"] == "BF16"
    np.testing.assert_array_equal(result.as_numpy("output_0").astype(np.float32), want)
    with shared_server.client() as http:
        response = http.post(
            "/infer",
            json={
                "model": "dtype-bf16",
                "inputs": [
                    {"shape": [2, 3], "datatype": "BF16", "data": x.float().reshape(-1).tolist()}
                ],
            },
        )
    assert response.status_code == 200, response.text
    [output] = response.json()["outputs"]
    assert output["datatype"] == "BF16"
    np.testing.assert_array_equal(np.array(output["data"], np.float32).reshape(2, 3), want)
