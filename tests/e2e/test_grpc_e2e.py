"""gRPC (inference.GRPCInferenceService) end to end: a real server process, the real, unmodified
tritonclient.grpc client, and its generated stubs for requests the client would never build."""

import json
import socket

import grpc
import numpy as np
import pytest
import torch
import tritonclient.grpc as triton
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from support.program_fixtures import (
    dynamic_batch_program,
    every_datatype_program,  # noqa: F401
    external_weights_program,
    linear_relu_program,
    two_methods_program,
)
from support.programs import EVERY_DATATYPE
from support.server import ServerProcess, upload


@pytest.fixture(scope="module")
def server(
    shared_server,
    linear_relu_program,
    every_datatype_program,
    dynamic_batch_program,
    two_methods_program,
):
    with shared_server.client() as client:
        for name, program in (
            ("linear", linear_relu_program),
            ("dtypes", every_datatype_program),
            ("dynamic", dynamic_batch_program),
            ("two", two_methods_program),
        ):
            response = upload(client, name, program.pte, program.ptds)
            assert response.status_code == 201, response.text
    return shared_server


@pytest.fixture
def client(server):
    with triton.InferenceServerClient(server.grpc_url) as grpc_client:
        yield grpc_client


@pytest.fixture
def stub(server):
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def infer_input(name, array, datatype=None):
    tensor = triton.InferInput(
        name, list(array.shape), datatype or triton.np_to_triton_dtype(array.dtype)
    )
    return tensor.set_data_from_numpy(array)


def every_datatype_inputs(arrays):
    return [
        infer_input(f"input_{i}", array, datatype)
        for i, (array, datatype) in enumerate(zip(arrays, EVERY_DATATYPE))
    ]


def rpc_error(call, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call(*args, **kwargs)
    return caught.value


def test_health_readiness_and_server_metadata(client):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("linear") and client.is_model_ready("linear", "1")
    assert not client.is_model_ready("missing") and not client.is_model_ready("linear", "7")
    metadata = client.get_server_metadata()
    assert metadata.name == "etrt-server" and metadata.version


def test_model_metadata_publishes_names_datatypes_and_dynamic_dims(client):
    metadata = client.get_model_metadata("dtypes")
    assert (metadata.name, list(metadata.versions), metadata.platform) == (
        "dtypes",
        ["1"],
        "executorch",
    )
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        (f"input_{i}", datatype, [2, 3]) for i, datatype in enumerate(EVERY_DATATYPE)
    ]
    assert [t.datatype for t in metadata.outputs] == list(EVERY_DATATYPE)
    dynamic = client.get_model_metadata("dynamic", "1")
    assert [list(t.shape) for t in dynamic.inputs] == [[-1, -1]]
    error = pytest.raises(InferenceServerException, client.get_model_metadata, "missing").value
    assert error.status() == "StatusCode.NOT_FOUND" and "'missing' not found" in error.message()


def test_every_datatype_round_trips_as_raw_contents(client, every_datatype_program):
    arrays = [x.numpy() for x in every_datatype_program.example_inputs]
    inputs = every_datatype_inputs(arrays)
    result = client.infer("dtypes", inputs, request_id="req-7")
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == ("dtypes", "1", "req-7")
    expected = every_datatype_program.module(*every_datatype_program.example_inputs)
    for i, want in enumerate(expected):
        got = result.as_numpy(f"output_{i}")
        assert got.dtype == want.numpy().dtype, EVERY_DATATYPE[i]
        np.testing.assert_array_equal(got, want.numpy(), err_msg=EVERY_DATATYPE[i])


def test_requested_outputs_come_back_in_the_order_asked(client, every_datatype_program):
    arrays = [x.numpy() for x in every_datatype_program.example_inputs]
    inputs = every_datatype_inputs(arrays)
    outputs = [triton.InferRequestedOutput("output_8"), triton.InferRequestedOutput("output_0")]
    result = client.infer("dtypes", inputs, outputs=outputs)
    assert [o.name for o in result.get_response().outputs] == ["output_8", "output_0"]
    np.testing.assert_array_equal(result.as_numpy("output_8"), ~arrays[8])
    np.testing.assert_array_equal(result.as_numpy("output_0"), arrays[0] * 2)
    assert result.as_numpy("output_1") is None
    outputs = [triton.InferRequestedOutput("nope")]
    error = pytest.raises(
        InferenceServerException, client.infer, "dtypes", inputs, outputs=outputs
    ).value
    assert error.status() == "StatusCode.INVALID_ARGUMENT" and "'nope'" in error.message()


def test_dynamic_shapes_and_the_timeout_parameter(client, dynamic_batch_program):
    x = torch.randn(5, 4)
    result = client.infer(
        "dynamic", [infer_input("input_0", x.numpy())], timeout=10_000_000, client_timeout=60
    )
    np.testing.assert_allclose(
        result.as_numpy("output_0"),
        dynamic_batch_program.module(x).detach().numpy(),
        rtol=1e-5,
        atol=1e-6,
    )


def test_the_method_parameter_runs_other_methods(client, two_methods_program):
    x = torch.randn(2, 3)
    triple, _ = two_methods_program.methods["triple"]
    for parameters, module in ((None, two_methods_program.module), ({"method": "triple"}, triple)):
        result = client.infer("two", [infer_input("input_0", x.numpy())], parameters=parameters)
        np.testing.assert_allclose(result.as_numpy("output_0"), module(x).numpy(), rtol=1e-6)
    error = pytest.raises(
        InferenceServerException,
        client.infer,
        "two",
        [infer_input("input_0", x.numpy())],
        parameters={"method": "half"},
    ).value
    assert error.status() == "StatusCode.NOT_FOUND" and "'half'" in error.message()


def test_unknown_model_is_not_found_with_our_message(client):
    x = infer_input("input_0", np.ones((2, 4), np.float32))
    error = pytest.raises(InferenceServerException, client.infer, "missing", [x]).value
    assert error.status() == "StatusCode.NOT_FOUND"
    assert error.message() == "model 'missing' not found"


def test_wrong_shape_and_datatype_are_invalid_argument_naming_the_input(client):
    error = pytest.raises(
        InferenceServerException,
        client.infer,
        "linear",
        [infer_input("input_0", np.ones((3, 4), np.float32))],
    ).value
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "input 'input_0'" in error.message()
    error = pytest.raises(
        InferenceServerException,
        client.infer,
        "linear",
        [infer_input("input_0", np.ones((2, 4), np.float64))],
    ).value
    assert error.status() == "StatusCode.INVALID_ARGUMENT" and "FP32" in error.message()


def linear_request(raw: bytes, shape=(2, 4), datatype="FP32") -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="linear")
    request.inputs.add(name="input_0", datatype=datatype, shape=list(shape))
    request.raw_input_contents.append(raw)
    return request


def test_bad_raw_length_is_invalid_argument_with_the_rule(stub):
    error = rpc_error(stub.ModelInfer.with_call, linear_request(b"\x00" * 31))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "input 'input_0': shape [2, 4] of FP32 needs 32 bytes of raw contents, got 31"
    )
    problems = json.loads(dict(error.trailing_metadata())["etrt-problems"])
    assert [(p["rule"], p["input"]) for p in problems] == [("input.size", "input_0")]


@pytest.mark.parametrize(
    "request_of, words",
    [
        (lambda: linear_request(b"", shape=(2, -4)), "negative"),
        (lambda: linear_request(b"\x00" * 32, shape=(2**62, 2**62)), "bytes of raw contents"),
        (lambda: linear_request(b"\x00" * 32, datatype="BYTES"), "unknown datatype"),
        (lambda: linear_request(b"\x00" * 32, datatype=""), "unknown datatype"),
    ],
)
def test_hostile_tensors_are_invalid_argument_never_internal(stub, request_of, words):
    error = rpc_error(stub.ModelInfer, request_of())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert words in error.details() and "input_0" in error.details()


@pytest.mark.parametrize("rpc", ["ModelInfer", "ModelMetadata"])
def test_malformed_messages_are_invalid_argument(server, rpc):
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary(f"/inference.GRPCInferenceService/{rpc}")
        for garbage in (b"\x3a\x05ab", b"\x0b", b"\x80"):
            error = rpc_error(call, garbage)
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
            assert rpc in error.details()


def test_raw_contents_count_and_parameters_are_checked(stub):
    request = linear_request(b"\x00" * 32)
    request.raw_input_contents.append(b"\x00" * 32)
    error = rpc_error(stub.ModelInfer, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "1 input(s)" in error.details()
    request = linear_request(b"\x00" * 32)
    request.parameters["timeout"].int64_param = -5
    error = rpc_error(stub.ModelInfer, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "timeout" in error.details()


def test_typed_contents_are_served_too(stub, linear_relu_program):
    x = torch.randn(2, 4)
    request = service_pb2.ModelInferRequest(model_name="linear", id="typed")
    tensor = request.inputs.add(name="input_0", datatype="FP32", shape=[2, 4])
    tensor.contents.fp32_contents.extend(x.reshape(-1).tolist())
    response = stub.ModelInfer(request)
    assert response.id == "typed" and response.outputs[0].datatype == "FP32"
    got = np.frombuffer(response.raw_output_contents[0], np.float32).reshape(2, 3)
    np.testing.assert_allclose(
        got, linear_relu_program.module(x).detach().numpy(), rtol=1e-5, atol=1e-6
    )


def test_rpcs_this_server_does_not_serve_are_unimplemented(stub):
    error = rpc_error(stub.TraceSetting, service_pb2.TraceSettingRequest(model_name="linear"))
    assert error.code() == grpc.StatusCode.UNIMPLEMENTED


def test_repository_load_with_files_serves_unload_and_load_again(
    client, stub, external_weights_program
):
    [weights] = external_weights_program.ptds
    files = {
        "file:1/model.pte": external_weights_program.pte.read_bytes(),
        f"file:1/{weights.name}": weights.read_bytes(),
    }
    client.load_model("repo", config=json.dumps({}), files=files)
    assert client.is_model_ready("repo")
    x = torch.randn(2, 6)
    result = client.infer("repo", [infer_input("input_0", x.numpy())])
    np.testing.assert_allclose(
        result.as_numpy("output_0"),
        external_weights_program.module(x).detach().numpy(),
        rtol=1e-5,
        atol=1e-6,
    )
    index = {m.name: m for m in client.get_model_repository_index().models}
    assert (index["repo"].version, index["repo"].state, index["repo"].reason) == ("1", "READY", "")
    client.unload_model("repo")
    assert not client.is_model_ready("repo")
    entry = {m.name: m for m in client.get_model_repository_index().models}["repo"]
    assert entry.state == "UNAVAILABLE" and entry.reason
    ready = stub.RepositoryIndex(service_pb2.RepositoryIndexRequest(ready=True)).models
    assert "repo" not in {m.name for m in ready} and "linear" in {m.name for m in ready}
    client.load_model("repo")
    assert client.is_model_ready("repo")
    assert "model_repository" in client.get_server_metadata().extensions


def test_a_refused_repository_load_names_the_rule_and_leaves_nothing(
    client, stub, external_weights_program
):
    before = client.get_model_repository_index()
    request = service_pb2.RepositoryModelLoadRequest(model_name="half")
    request.parameters["file:1/model.pte"].bytes_param = external_weights_program.pte.read_bytes()
    error = rpc_error(stub.RepositoryModelLoad.with_call, request)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    rules = {p["rule"] for p in json.loads(dict(error.trailing_metadata())["etrt-problems"])}
    assert rules == {"external.missing_key"}
    assert "external.missing_key: method 'forward' needs external data" in error.details()
    # tritonclient shows the status details only, so they carry the reason.
    with pytest.raises(InferenceServerException) as caught:
        client.load_model(
            "half", files={"file:1/model.pte": request.parameters["file:1/model.pte"].bytes_param}
        )
    assert "upload refused: external.missing_key: method 'forward'" in caught.value.message()
    assert client.get_model_repository_index() == before
    assert not client.is_model_ready("half")
    for key, value in (("config", "{not json"), ("colour", "red")):
        request = service_pb2.RepositoryModelLoadRequest(model_name="half")
        request.parameters[key].string_param = value
        error = rpc_error(stub.RepositoryModelLoad, request)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and key in error.details()
    error = rpc_error(
        stub.RepositoryModelUnload, service_pb2.RepositoryModelUnloadRequest(model_name="missing")
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND


def test_statistics_count_grpc_requests(client):
    def stats():
        [model] = client.get_inference_statistics("linear").model_stats
        return model

    before = stats()
    x = infer_input("input_0", np.ones((2, 4), np.float32))
    for _ in range(2):
        client.infer("linear", [x])
    with pytest.raises(InferenceServerException):
        client.infer("linear", [infer_input("input_0", np.ones((3, 4), np.float32))])
    after = stats()
    assert (after.name, after.version) == ("linear", "1")
    assert after.inference_count - before.inference_count == 2
    assert after.inference_stats.success.count - before.inference_stats.success.count == 2
    assert after.inference_stats.success.ns > before.inference_stats.success.ns
    assert after.inference_stats.fail.count - before.inference_stats.fail.count == 1
    assert after.last_inference >= before.last_inference and after.last_inference > 0
    every = {m.name for m in client.get_inference_statistics().model_stats}
    assert {"linear", "dtypes", "dynamic", "two"} <= every
    error = pytest.raises(
        InferenceServerException, client.get_inference_statistics, "missing"
    ).value
    assert error.status() == "StatusCode.NOT_FOUND"
    assert "statistics" in client.get_server_metadata().extensions


def test_requests_larger_than_max_infer_bytes_are_resource_exhausted(start_server):
    server = start_server("--max-infer-bytes", "1024")
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        error = rpc_error(stub.ModelInfer, linear_request(b"\x00" * 4096))
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        # Smaller ones are read and answered (here: the model does not exist).
        error = rpc_error(stub.ModelInfer, linear_request(b"\x00" * 32))
        assert error.code() == grpc.StatusCode.NOT_FOUND


def test_grpc_port_zero_serves_no_grpc(start_server):
    server = start_server("--grpc-port", "0")
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", server.grpc_port)) != 0


def test_a_grpc_port_in_use_stops_a_second_server_from_starting(server, tmp_path):
    # gRPC would otherwise share the port with SO_REUSEPORT and split calls between the two.
    second = ServerProcess(tmp_path / "artifacts", "--grpc-port", str(server.grpc_port))
    with pytest.raises(RuntimeError, match=f"gRPC cannot listen on 127.0.0.1:{server.grpc_port}"):
        second.start(timeout=60)
