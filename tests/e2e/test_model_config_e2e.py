"""The model configuration extension through unmodified tritonclient.http and tritonclient.grpc:
Triton's ModelConfig of a plain and of a batched model, as perf_analyzer reads it (max_batch_size,
input and output names matching the metadata, dims without the batch dimension, the scheduler)."""

import json

import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from support.program_fixtures import dynamic_batch_program, linear_relu_program  # noqa: F401
from support.server import upload

BATCHED = {
    "max_batch_size": 8,
    "dynamic_batching": {
        "max_queue_delay_microseconds": 500,
        "preferred_batch_size": [4],
        "default_queue_policy": {"max_queue_size": 16, "default_timeout_microseconds": 0},
    },
    "instance_group": [{"count": 2}],
}


@pytest.fixture(scope="module")
def server(shared_server, linear_relu_program, dynamic_batch_program):
    with shared_server.client() as client:
        for name, program, config in (
            ("plain", linear_relu_program, None),
            ("batched", dynamic_batch_program, BATCHED),
        ):
            fields = {"config": json.dumps(config)} if config else None
            response = upload(client, name, program.pte, fields=fields)
            assert response.status_code == 201, response.text
    return shared_server


@pytest.fixture
def http_client(server):
    with triton_http.InferenceServerClient(server.url.removeprefix("http://")) as client:
        yield client


@pytest.fixture
def grpc_client(server):
    with triton_grpc.InferenceServerClient(server.grpc_url) as client:
        yield client


def test_both_protocols_list_the_extension(http_client, grpc_client):
    assert "model_configuration" in http_client.get_server_metadata()["extensions"]
    assert "model_configuration" in grpc_client.get_server_metadata().extensions


def test_a_plain_model_has_its_full_shapes_and_no_batching(http_client, grpc_client):
    config = http_client.get_model_config("plain")
    assert config["name"] == "plain" and config["platform"] == "executorch"
    assert config["max_batch_size"] == 0 and "dynamic_batching" not in config
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [
        ("input_0", "TYPE_FP32", [2, 4])
    ]
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["output"]] == [
        ("output_0", "TYPE_FP32", [2, 3])
    ]
    assert config["version_policy"] == {"latest": {"num_versions": 1}}
    assert config["model_warmup"] == []
    # perf_analyzer requires every configured tensor to be one the metadata lists.
    metadata = http_client.get_model_metadata("plain")
    assert {t["name"] for t in metadata["inputs"]} == {t["name"] for t in config["input"]}
    assert {t["name"] for t in metadata["outputs"]} == {t["name"] for t in config["output"]}
    [group] = config["instance_group"]
    assert group["kind"] == "KIND_CPU" and group["count"] >= 1

    answer = grpc_client.get_model_config("plain")
    parsed = model_config_pb2.ModelConfig.FromString(answer.config.SerializeToString())
    assert parsed.name == "plain" and parsed.max_batch_size == 0
    assert [(t.name, t.data_type, list(t.dims)) for t in parsed.input] == [
        ("input_0", model_config_pb2.TYPE_FP32, [2, 4])
    ]
    assert [(t.name, t.data_type, list(t.dims)) for t in parsed.output] == [
        ("output_0", model_config_pb2.TYPE_FP32, [2, 3])
    ]
    assert not parsed.HasField("dynamic_batching")
    assert parsed.version_policy.latest.num_versions == 1


def test_a_batched_model_drops_the_batch_dimension_and_shows_its_scheduler(
    http_client, grpc_client
):
    config = http_client.get_model_config("batched")
    assert http_client.get_model_config("batched", "1") == config
    assert config["max_batch_size"] == 8
    # Dim 0 is the batch; the program marks its other dimension dynamic too.
    assert [(t["name"], t["dims"]) for t in config["input"]] == [("input_0", [-1])]
    assert [(t["name"], t["dims"]) for t in config["output"]] == [("output_0", [-1])]
    batching = config["dynamic_batching"]
    assert batching["max_queue_delay_microseconds"] == 500
    assert batching["preferred_batch_size"] == [4]
    assert batching["default_queue_policy"]["max_queue_size"] == 16
    assert [g["count"] for g in config["instance_group"]] == [2]

    answer = grpc_client.get_model_config("batched", as_json=True)
    assert answer["config"]["max_batch_size"] == 8
    message = grpc_client.get_model_config("batched").config
    assert isinstance(message, model_config_pb2.ModelConfig)
    assert message.dynamic_batching.preferred_batch_size == [4]
    assert message.dynamic_batching.max_queue_delay_microseconds == 500
    assert message.dynamic_batching.default_queue_policy.max_queue_size == 16
    assert [list(t.dims) for t in message.input] == [[-1]]
    assert [g.count for g in message.instance_group] == [2]
    # The gRPC message carries what the REST answer says, field for field.
    assert (
        json_format.MessageToDict(message, preserving_proto_field_name=True)["name"]
        == (config["name"])
    )


def test_unknown_models_and_versions_are_not_found(http_client, grpc_client):
    for call in (
        lambda: http_client.get_model_config("missing"),
        lambda: http_client.get_model_config("plain", "7"),
    ):
        with pytest.raises(InferenceServerException, match="not found|no version"):
            call()
    with pytest.raises(InferenceServerException) as caught:
        grpc_client.get_model_config("missing")
    assert caught.value.status() == "StatusCode.NOT_FOUND"
