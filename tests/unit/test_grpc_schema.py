"""The committed gRPC schema: regenerated from the .proto it is unchanged, and on the wire it is
the contract tritonclient.grpc's stubs speak (imported here, in the same process as ours)."""

from google.protobuf import descriptor_pb2
from tritonclient.grpc import service_pb2 as triton

from service.front.protocols.v2_grpc import descriptor, generate, messages


def test_regenerating_from_the_proto_yields_the_committed_module():
    assert generate.render(generate.compile_proto()) == generate.OUTPUT.read_text(), (
        "grpc_service.proto changed: run `python -m service.front.protocols.v2_grpc.generate`"
    )


def ours() -> descriptor_pb2.FileDescriptorProto:
    return descriptor_pb2.FileDescriptorProto.FromString(descriptor.FILE_DESCRIPTOR)


def _fields(message) -> dict:
    """name -> what the wire depends on: number, type, repeated, message type, oneof."""
    return {
        f.name: (
            f.number,
            f.type,
            f.is_repeated,
            f.message_type.full_name if f.message_type else None,
            f.containing_oneof.name if f.containing_oneof else None,
        )
        for f in message.fields
    }


def _messages(message) -> list:
    return [message] + [m for nested in message.nested_types for m in _messages(nested)]


def test_every_message_matches_tritonclients_field_for_field():
    checked = 0
    for top in messages._pool.FindFileByName(ours().name).message_types_by_name.values():
        for message in _messages(top):
            theirs = triton.DESCRIPTOR.pool.FindMessageTypeByName(message.full_name)
            their_fields = _fields(theirs)
            for name, wire in _fields(message).items():
                assert their_fields.get(name) == wire, f"{message.full_name}.{name}"
            checked += 1
    assert checked >= 30


def test_every_rpc_has_tritonclients_path_and_types():
    theirs = triton.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert messages.service_descriptor.full_name == theirs.full_name
    for method in messages.service_descriptor.methods:
        their = theirs.methods_by_name[method.name]
        assert (method.input_type.full_name, method.output_type.full_name) == (
            their.input_type.full_name,
            their.output_type.full_name,
        )
        assert not (their.client_streaming or their.server_streaming)


def test_a_full_request_crosses_between_the_two_schemas_unchanged():
    request = triton.ModelInferRequest(model_name="m", model_version="1", id="r1")
    request.parameters["timeout"].int64_param = 5
    request.parameters["ratio"].double_param = 0.5
    request.parameters["priority"].uint64_param = 2**63
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[2, -1])
    tensor.parameters["p"].string_param = "v"
    tensor.contents.fp32_contents.extend([1.5, 2.5])
    request.outputs.add(name="y").parameters["binary_data"].bool_param = True
    request.raw_input_contents.append(b"\x00\x01")
    wire = request.SerializeToString()
    parsed = messages.ModelInferRequest.FromString(wire)
    assert parsed.parameters["priority"].uint64_param == 2**63
    assert list(parsed.inputs[0].contents.fp32_contents) == [1.5, 2.5]
    assert triton.ModelInferRequest.FromString(parsed.SerializeToString()) == request


def test_every_enum_has_tritonclients_values():
    """The model configuration's enums (DataType, kinds, formats) travel as numbers."""
    from tritonclient.grpc import model_config_pb2

    file = messages._pool.FindFileByName(ours().name)
    enums = list(file.enum_types_by_name.values())
    enums += [
        e
        for top in file.message_types_by_name.values()
        for m in _messages(top)
        for e in m.enum_types
    ]
    for enum in enums:
        theirs = model_config_pb2.DESCRIPTOR.pool.FindEnumTypeByName(enum.full_name)
        values = {v.name: v.number for v in enum.values}
        assert values == {v.name: v.number for v in theirs.values if v.name in values}, (
            enum.full_name
        )
    assert len(enums) >= 4
