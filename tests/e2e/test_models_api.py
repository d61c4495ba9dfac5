"""Deploy real exported programs over HTTP, predict, compare with eager torch, restart, manage."""

import json

import numpy as np
import pytest
import torch

from support.program_fixtures import (
    dynamic_batch_program,
    external_weights_program,  # noqa: F401
    linear_relu_program,
    mix_of_ops_program,
    split_weights_program,
    two_methods_program,
)
from support.server import registry_rows, stored_files, tensor, upload


def predict(client, model, inputs, method=None):
    body = {"model": model, "inputs": [tensor(x) for x in inputs]}
    if method:
        body["method"] = method
    response = client.post("/infer", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def assert_matches(outputs, expected):
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        want = want.detach().numpy()
        assert got["shape"] == list(want.shape)
        np.testing.assert_allclose(
            np.array(got["data"]).reshape(want.shape), want, rtol=1e-5, atol=1e-6
        )


def deploy(client, name, exported, **kwargs):
    response = upload(client, name, exported.pte, exported.ptds, **kwargs)
    assert response.status_code == 201, response.text
    return response.json()


def test_program_without_external_data(shared_server, linear_relu_program):
    with shared_server.client() as client:
        description = deploy(client, "linear", linear_relu_program, program_name="linear.pte")
        assert description["state"] == "ready" and description["warnings"] == []
        [program_file] = description["files"]
        assert program_file["name"] == "linear.pte" and program_file["role"] == "program"
        assert program_file["bytes"] == linear_relu_program.pte.stat().st_size
        [method] = description["methods"]
        assert method["name"] == "forward" and method["inputs"][0]["shape"] == [2, 4]
        # Named and typed exactly as /infer takes them.
        [spec] = method["inputs"]
        assert (spec["name"], spec["datatype"], "dtype" in spec) == ("input_0", "FP32", False)
        assert [(o["name"], o["datatype"]) for o in method["outputs"]] == [("output_0", "FP32")]
        named = client.post(
            "/infer",
            json={
                "model": "linear",
                "inputs": [tensor(np.zeros((2, 4), np.float32), spec["name"], spec["datatype"])],
            },
        )
        assert named.status_code == 200, named.text
        x = torch.randn(2, 4)
        result = predict(client, "linear", [x])
        assert result["model"] == "linear" and result["method"] == "forward"
        assert result["outputs"][0]["datatype"] == "FP32"
        assert_matches(result["outputs"], linear_relu_program.module(x))


def test_program_with_one_data_file(shared_server, external_weights_program):
    with shared_server.client() as client:
        description = deploy(client, "external", external_weights_program)
        assert [f["name"] for f in description["files"]] == [
            "model.pte",
            "_default_external_constant.ptd",
        ]
        assert description["methods"][0]["external_data_keys"] == [
            "first.bias",
            "first.weight",
            "second.bias",
            "second.weight",
        ]
        x = torch.randn(2, 6)
        assert_matches(
            predict(client, "external", [x])["outputs"], external_weights_program.module(x)
        )


def test_program_with_two_data_files(shared_server, split_weights_program):
    with shared_server.client() as client:
        deploy(client, "split", split_weights_program)
        x = torch.randn(2, 6)
        assert_matches(predict(client, "split", [x])["outputs"], split_weights_program.module(x))


def test_int64_input_and_two_outputs(shared_server, mix_of_ops_program):
    with shared_server.client() as client:
        deploy(client, "mix", mix_of_ops_program)
        x, idx = mix_of_ops_program.example_inputs
        result = predict(client, "mix", [x, idx])
        assert_matches(result["outputs"], mix_of_ops_program.module(x, idx))


def test_dynamic_batch_within_bound(shared_server, dynamic_batch_program):
    with shared_server.client() as client:
        deploy(client, "dynamic", dynamic_batch_program)
        for batch in (1, 5):
            x = torch.randn(batch, 4)
            assert_matches(
                predict(client, "dynamic", [x])["outputs"], dynamic_batch_program.module(x)
            )
        response = client.post(
            "/infer", json={"model": "dynamic", "inputs": [tensor(torch.randn(17, 4))]}
        )
        assert response.status_code == 422 and response.json()["problems"][0]["input"] == "input_0"


def test_two_methods_and_method_selection(shared_server, two_methods_program):
    with shared_server.client() as client:
        deploy(client, "two", two_methods_program)
        x = torch.randn(2, 3)
        assert_matches(predict(client, "two", [x])["outputs"], two_methods_program.module(x))
        triple, _ = two_methods_program.methods["triple"]
        assert_matches(predict(client, "two", [x], method="triple")["outputs"], triple(x))
        response = client.post(
            "/infer", json={"model": "two", "method": "nope", "inputs": [tensor(x)]}
        )
        assert response.status_code == 404 and "nope" in response.json()["error"]


def test_list_describe_and_openapi(shared_server, linear_relu_program):
    with shared_server.client() as client:
        deploy(client, "listed", linear_relu_program)
        names = [m["name"] for m in client.get("/models").json()]
        assert "listed" in names and names == sorted(names)
        description = client.get("/models/listed").json()
        assert description["files"][0]["sha256"] and description["methods"][0]["outputs"]
        assert client.get("/openapi.json").status_code == 200
        assert client.get("/docs").status_code == 200
        assert client.get("/health/live").json() == {"status": "live"}


@pytest.mark.parametrize("method,path", [("GET", "/models/ghost"), ("DELETE", "/models/ghost")])
def test_unknown_model_is_404(shared_server, method, path):
    with shared_server.client() as client:
        response = client.request(method, path)
        assert response.status_code == 404 and "ghost" in response.json()["error"]


def test_infer_unknown_model_is_404(shared_server):
    with shared_server.client() as client:
        response = client.post("/infer", json={"model": "ghost", "inputs": []})
        assert response.status_code == 404 and "ghost" in response.json()["error"]


@pytest.mark.parametrize(
    "inputs,rule,named",
    [
        ([], "input.count", None),
        (
            [tensor(np.zeros((2, 4), np.float32)), tensor(np.zeros((2, 4), np.float32))],
            "input.count",
            None,
        ),
        ([tensor(np.zeros((2, 4), np.float64))], "input.datatype", "input_0"),
        ([tensor(np.zeros((2, 5), np.float32), name="input_0")], "input.shape", "input_0"),
        ([tensor(np.zeros((2, 4), np.float32), name="x")], "input.unknown", "x"),
        ([tensor(np.zeros((8,), np.float32))], "input.shape", "input_0"),
        ([{"shape": [2, 4], "datatype": "FP32", "data": [1.0] * 7}], "input.data", "input_0"),
        ([{"shape": [2, 4], "datatype": "FP99", "data": [1.0] * 8}], "input.data", "input_0"),
        ([{"shape": [2, 4], "datatype": "FP32"}], "request.invalid", "input_0"),
    ],
)
def test_bad_inputs_are_422_naming_the_input(
    shared_server, linear_relu_program, inputs, rule, named
):
    with shared_server.client() as client:
        if client.get("/models/bad-inputs").status_code == 404:
            deploy(client, "bad-inputs", linear_relu_program)
        response = client.post("/infer", json={"model": "bad-inputs", "inputs": inputs})
        assert response.status_code == 422, response.text
        [problem] = response.json()["problems"]
        assert problem["rule"] == rule and problem.get("input") == named
        if named:
            assert named in problem["message"] or rule == "request.invalid"


def test_conflict_then_atomic_replace(shared_server, linear_relu_program, two_methods_program):
    with shared_server.client() as client:
        deploy(client, "swap", linear_relu_program)
        before = stored_files(shared_server.artifacts)
        response = upload(client, "swap", two_methods_program.pte)
        assert response.status_code == 409 and "replace" in response.json()["error"]
        assert stored_files(shared_server.artifacts) == before
        description = deploy(client, "swap", two_methods_program, replace=True)
        assert [m["name"] for m in description["methods"]] == ["forward", "triple"]
        x = torch.randn(2, 3)
        assert_matches(
            predict(client, "swap", [x], method="triple")["outputs"],
            two_methods_program.methods["triple"][0](x),
        )
        assert registry_rows(shared_server.artifacts).count("swap") == 1
        swap_dirs = {
            p.split("/")[1]
            for p in stored_files(shared_server.artifacts)
            if p.startswith("models/swap.")
        }
        assert len(swap_dirs) == 1


def test_replace_with_a_refused_upload_keeps_the_old_model(shared_server, linear_relu_program):
    with shared_server.client() as client:
        deploy(client, "keep", linear_relu_program)
        before = stored_files(shared_server.artifacts)
        response = upload(client, "keep", b"not a program", replace=True)
        assert response.status_code == 422
        assert stored_files(shared_server.artifacts) == before
        x = torch.randn(2, 4)
        assert_matches(predict(client, "keep", [x])["outputs"], linear_relu_program.module(x))


def test_delete_removes_files_and_row(shared_server, external_weights_program):
    with shared_server.client() as client:
        deploy(client, "gone", external_weights_program)
        assert client.delete("/models/gone").status_code == 204
        assert client.get("/models/gone").status_code == 404
        assert "gone" not in registry_rows(shared_server.artifacts)
        assert not [
            p for p in stored_files(shared_server.artifacts) if p.startswith("models/gone.")
        ]


def test_models_survive_a_restart(start_server, external_weights_program, linear_relu_program):
    server = start_server()
    x = torch.randn(2, 6)
    with server.client() as client:
        deploy(client, "persisted", external_weights_program)
        deploy(client, "deleted", linear_relu_program)
        assert client.delete("/models/deleted").status_code == 204
        first = predict(client, "persisted", [x])
    server.restart()
    with server.client() as client:
        assert [m["name"] for m in client.get("/models").json()] == ["persisted"]
        assert predict(client, "persisted", [x]) == first
    assert_matches(first["outputs"], external_weights_program.module(x))


def test_upload_over_the_size_limit_is_413_and_leaves_nothing(
    start_server, linear_relu_program, external_weights_program
):
    server = start_server("--max-program-bytes", "1000", "--max-data-bytes", "500")
    with server.client() as client:
        response = upload(client, "big", linear_relu_program.pte)
        assert response.status_code == 413 and "1000 bytes" in response.json()["error"]
        response = upload(client, "big", b"x" * 100, [("w.ptd", b"y" * 501)])
        assert response.status_code == 413
    assert stored_files(server.artifacts) == ["registry.sqlite3"]
    assert registry_rows(server.artifacts) == []


def test_request_over_the_total_limit_is_413(start_server):
    server = start_server("--max-upload-bytes", "2000")
    with server.client() as client:
        response = upload(client, "big", b"x" * 3000)
        assert response.status_code == 413
    assert stored_files(server.artifacts) == ["registry.sqlite3"]


@pytest.mark.parametrize("limit", ["--max-infer-bytes", "--max-json-bytes"])
def test_infer_body_over_the_limit_is_413_before_parsing(start_server, linear_relu_program, limit):
    """JSON bodies are bounded by their own limit and by the limit of every inference body."""
    server = start_server(limit, "4096")
    x = np.ones((2, 4), np.float32)
    with server.client() as client:
        assert upload(client, "lin", linear_relu_program.pte).status_code == 201
        assert predict(client, "lin", [x])["outputs"]  # a small request still runs
        big = {
            "model": "lin",
            "inputs": [{"shape": [2, 4], "datatype": "FP32", "data": [0.5] * 2000}],
        }
        declared = client.post("/infer", json=big)
        assert declared.status_code == 413
        assert declared.json()["problems"][0]["rule"] == "request.too_large"
        assert "limit of 4096 bytes" in declared.json()["error"]

        def chunks():  # no Content-Length: the limit must hold for a streamed body too
            payload = json.dumps(big).encode()
            for start in range(0, len(payload), 1000):
                yield payload[start : start + 1000]

        streamed = client.post(
            "/infer", content=chunks(), headers={"content-type": "application/json"}
        )
        assert streamed.status_code == 413
        assert predict(client, "lin", [x])["outputs"]  # the server is fine afterwards
