"""Splitting tensor payloads out of protobuf messages and joining them back, checked against
protobuf's own parser and serializer, and on malformed messages."""

import numpy as np
import pytest
from google.protobuf.message import DecodeError

from service.front.protocols.v2_grpc import messages, wire

RAW_INPUTS = messages.field_number("ModelInferRequest", "raw_input_contents")
RAW_OUTPUTS = messages.field_number("ModelInferResponse", "raw_output_contents")


def full_request():
    request = messages.ModelInferRequest(model_name="m", model_version="1", id="r")
    request.parameters["timeout"].int64_param = -3
    request.parameters["ratio"].double_param = 0.25
    request.inputs.add(name="a", datatype="FP32", shape=[2, 2])
    request.inputs.add(name="b", datatype="BOOL", shape=[0])
    request.outputs.add(name="y")
    request.raw_input_contents.extend([bytes(range(16)), b"", b"\xff" * 300])
    return request


def test_split_gives_protobufs_message_and_views_of_the_payloads():
    request = full_request()
    data = request.SerializeToString()
    rest, payloads = wire.split_field(data, RAW_INPUTS)
    assert [bytes(p) for p in payloads] == list(request.raw_input_contents)
    assert all(p.obj is data for p in payloads)  # views into the received bytes, no copies
    parsed = messages.ModelInferRequest.FromString(rest)
    assert not parsed.raw_input_contents
    del request.raw_input_contents[:]
    assert parsed == request


def test_a_message_without_the_field_is_returned_whole():
    data = messages.ModelInferRequest(model_name="m").SerializeToString()
    assert wire.split_field(data, RAW_INPUTS) == (data, [])
    assert wire.split_field(b"", RAW_INPUTS) == (b"", [])


@pytest.mark.parametrize(
    "data",
    [
        b"\x80",  # tag varint cut short
        b"\x3a\x05ab",  # length-delimited field longer than the message
        b"\x3a\xff\xff\xff\xff\x0f",  # a 4 GiB length in a 6-byte message
        b"\x3a" + b"\xff" * 11,  # varint longer than 10 bytes
        b"\x09\x01\x02",  # fixed64 cut short
        b"\x0b",  # start group: not in proto3
        b"\x02\x00",  # field number 0
    ],
)
def test_malformed_messages_are_decode_errors(data):
    with pytest.raises(DecodeError):
        wire.split_field(data, RAW_INPUTS)


def test_join_is_what_protobuf_would_serialize():
    response = messages.ModelInferResponse(model_name="m", model_version="1", id="r")
    response.outputs.add(name="y", datatype="FP32", shape=[2, 3])
    arrays = [np.arange(6, dtype=np.float32), np.zeros(0, np.int64), np.ones(300, np.bool_)]
    joined = wire.join_field(response.SerializeToString(), RAW_OUTPUTS, arrays)
    response.raw_output_contents.extend(a.tobytes() for a in arrays)
    assert messages.ModelInferResponse.FromString(joined) == response


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32, 2**63])
def test_varints_round_trip(value):
    encoded = wire.encode_varint(value)
    assert wire._varint(memoryview(encoded), 0) == (value, len(encoded))
