"""The gRPC tensor codec on hostile contents: every malformed tensor is an Invalid naming it."""

from types import SimpleNamespace

import numpy as np
import pytest

from service.errors import ExecutionFailed, Invalid
from service.front.protocols.v2_grpc import codec


def contents(**lists):
    fields = (
        "bool_contents",
        "int_contents",
        "int64_contents",
        "uint_contents",
        "uint64_contents",
        "fp32_contents",
        "fp64_contents",
        "bytes_contents",
    )
    return SimpleNamespace(**{name: lists.get(name, []) for name in fields})


class Input(SimpleNamespace):
    def HasField(self, name):
        return getattr(self, name, None) is not None


def refused(call, *args) -> Invalid:
    with pytest.raises(Invalid) as caught:
        call(*args)
    return caught.value


def the_problem(error: Invalid):
    [problem] = error.problems
    return problem


@pytest.mark.parametrize(
    "datatype, array",
    [
        ("FP32", np.arange(6, dtype=np.float32) / 3),
        ("FP16", np.arange(6, dtype=np.float16) / 3),
        ("FP64", np.arange(6, dtype=np.float64) / 3),
        ("INT8", np.array([-128, -1, 0, 1, 2, 127], dtype=np.int8)),
        ("INT16", np.array([-32768, -1, 0, 1, 2, 32767], dtype=np.int16)),
        ("INT32", np.array([-(2**31), -1, 0, 1, 2, 2**31 - 1], dtype=np.int32)),
        ("INT64", np.array([-(2**63), -1, 0, 1, 2, 2**63 - 1], dtype=np.int64)),
        ("UINT8", np.array([0, 1, 2, 3, 254, 255], dtype=np.uint8)),
        ("BOOL", np.array([True, False, True, True, False, False])),
        ("BF16", np.array([0x3F80, 0xBF80, 0, 0x7FC0, 0x4000, 1], dtype=np.uint16)),
    ],
)
def test_raw_contents_round_trip_every_datatype(datatype, array):
    array = array.reshape(2, 3)
    raw = codec.encode_raw("out", datatype, array).tobytes()
    assert len(raw) == array.size * array.itemsize
    decoded = codec.decode_raw("x", datatype, [2, 3], raw)
    assert decoded.dtype == array.dtype and decoded.shape == (2, 3)
    np.testing.assert_array_equal(decoded, array)


def test_raw_contents_are_little_endian():
    assert codec.encode_raw("out", "INT32", np.array([1], dtype=">i4")).tobytes() == (
        b"\x01\x00\x00\x00"
    )
    assert codec.decode_raw("x", "INT16", [1], b"\x02\x01")[0] == 0x0102


def test_raw_length_must_match_the_shape_and_datatype():
    for raw in (b"", b"\x00" * 31, b"\x00" * 33):
        problem = the_problem(refused(codec.decode_raw, "image", "FP32", [2, 4], raw))
        assert problem.input == "image" and problem.rule == "input.size"
        assert "'image'" in problem.message and "32 bytes" in problem.message
        assert f"got {len(raw)}" in problem.message


def test_negative_dimensions_are_refused():
    problem = the_problem(refused(codec.decode_raw, "x", "FP32", [2, -1], b"\x00" * 8))
    assert problem.rule == "input.shape" and "negative" in problem.message


def test_overflowing_shapes_are_a_size_mismatch_not_a_crash():
    # 2**62 * 2**62 elements would overflow int64 arithmetic; the check must still refuse it.
    problem = the_problem(refused(codec.decode_raw, "x", "FP32", [2**62, 2**62], b"\x00" * 16))
    assert problem.rule == "input.size"
    problem = the_problem(refused(codec.decode_raw, "x", "INT64", [2**63 - 1], b""))
    assert problem.rule == "input.size"


def test_shapes_numpy_cannot_hold_are_refused():
    problem = the_problem(refused(codec.decode_raw, "x", "FP32", [1] * 100, b"\x00" * 4))
    assert problem.rule == "input.shape" and "'x'" in problem.message
    problem = the_problem(refused(codec.decode_raw, "x", "FP32", [0, 2**62, 2**62], b""))
    assert problem.rule == "input.shape"


@pytest.mark.parametrize("datatype", ["FOO", "", "BYTES", "fp32", "UINT64"])
def test_unknown_or_unserved_datatypes_are_refused(datatype):
    problem = the_problem(refused(codec.decode_raw, "x", datatype, [1], b"\x00" * 8))
    assert problem.rule == "input.datatype" and "FP32" in problem.message


def test_long_client_strings_are_clipped_in_messages():
    error = refused(codec.decode_raw, "n" * 100_000, "D" * 100_000, [1], b"")
    assert len(error.message) < 1000


def test_bool_bytes_other_than_zero_and_one_mean_true():
    decoded = codec.decode_raw("flags", "BOOL", [4], bytes([0, 1, 2, 255]))
    assert decoded.dtype == np.bool_
    assert decoded.view(np.uint8).tolist() == [0, 1, 1, 1]


def test_typed_contents_decode_into_the_datatype():
    decoded = codec.decode_contents("x", "INT8", [3], contents(int_contents=[-128, 0, 127]))
    assert decoded.dtype == np.int8 and decoded.tolist() == [-128, 0, 127]
    decoded = codec.decode_contents("x", "FP32", [1, 2], contents(fp32_contents=[0.5, -2.0]))
    assert decoded.dtype == np.float32 and decoded.tolist() == [[0.5, -2.0]]
    decoded = codec.decode_contents("x", "BOOL", [2], contents(bool_contents=[True, False]))
    assert decoded.dtype == np.bool_ and decoded.tolist() == [True, False]


def test_typed_contents_are_checked():
    problem = the_problem(
        refused(codec.decode_contents, "x", "FP32", [2, 2], contents(fp32_contents=[1.0, 2.0]))
    )
    assert problem.rule == "input.contents" and "fp32_contents" in problem.message
    # Values in the list of another datatype are not taken.
    problem = the_problem(
        refused(codec.decode_contents, "x", "FP32", [2], contents(int_contents=[1, 2]))
    )
    assert "needs 2 values in contents.fp32_contents, got 0" in problem.message
    problem = the_problem(
        refused(codec.decode_contents, "x", "INT8", [2], contents(int_contents=[1, 300]))
    )
    assert "300" in problem.message and "INT8" in problem.message
    problem = the_problem(
        refused(codec.decode_contents, "x", "UINT8", [1], contents(uint_contents=[256]))
    )
    assert "256" in problem.message
    problem = the_problem(refused(codec.decode_contents, "x", "FP16", [1], contents()))
    assert "raw_input_contents" in problem.message


def test_a_request_sends_one_raw_entry_per_input_and_never_both_kinds():
    inputs = [
        Input(name="a", datatype="FP32", shape=[1], contents=None),
        Input(name="b", datatype="FP32", shape=[1], contents=None),
    ]
    error = refused(codec.decode_inputs, inputs, [b"\x00" * 4])
    assert "2 input(s)" in error.message and "1 raw_input_contents" in error.message
    inputs[1].contents = contents(fp32_contents=[1.0])
    problem = the_problem(refused(codec.decode_inputs, inputs, [b"\x00" * 4] * 2))
    assert problem.input == "b" and "one or the other" in problem.message
    inputs[0].contents = contents(fp32_contents=[2.0])
    decoded = codec.decode_inputs(inputs, [])
    assert [(name, datatype, a.tolist()) for name, datatype, a in decoded] == [
        ("a", "FP32", [2.0]),
        ("b", "FP32", [1.0]),
    ]


def test_an_output_without_a_protocol_datatype_is_the_servers_failure():
    with pytest.raises(ExecutionFailed):
        codec.encode_raw("out", None, np.zeros(2, dtype=np.uint32))
