"""The v2 binary tensor codec on well-formed and hostile requests: every bad request is an Invalid
(400 in the v2 table) that names the input and the rule, never another exception."""

import json

import numpy as np
import pytest

from service.errors import Invalid
from service.front.protocols.json_tensors import bf16_bits_to_float32, float32_to_bf16_bits
from service.front.protocols.v2_rest import binary, codec
from service.front.protocols.v2_rest.errors import service_error_response


def body_of(header, payload: bytes = b"") -> tuple[bytearray, str]:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return bytearray(text + payload), str(len(text))


def decode(header, payload: bytes = b"", header_length: str | None = None):
    body, length = body_of(header, payload)
    text, binary_part = binary.split(body, length if header_length is None else header_length)
    parsed = codec.parse_header(bytes(text))
    return codec.to_request("m", None, parsed, binary_part), body


def one_input(size, shape=(2, 2), datatype="FP32", name="x", **extra) -> dict:
    return {
        "inputs": [
            {
                "name": name,
                "shape": list(shape),
                "datatype": datatype,
                "parameters": {"binary_data_size": size},
                **extra,
            }
        ]
    }


def refused(header, payload: bytes = b"", header_length: str | None = None) -> Invalid:
    with pytest.raises(Invalid) as caught:
        decode(header, payload, header_length)
    assert service_error_response(caught.value).status_code == 400
    return caught.value


def test_inputs_are_views_of_the_body_in_header_order():
    a = np.arange(4, dtype=np.float32).reshape(2, 2)
    b = np.array([[True, False, True]])
    header = {
        "inputs": [
            {
                "name": "a",
                "shape": [2, 2],
                "datatype": "FP32",
                "parameters": {"binary_data_size": 16},
            },
            {"name": "j", "shape": [2], "datatype": "INT64", "data": [5, 6]},
            {
                "name": "b",
                "shape": [1, 3],
                "datatype": "BOOL",
                "parameters": {"binary_data_size": 3},
            },
        ],
        "outputs": [{"name": "output_0", "parameters": {"binary_data": True}}],
        "parameters": {"timeout": 2500, "method": "triple"},
        "id": "r1",
    }
    text = json.dumps(header).encode()
    # Pad the header to a multiple of 4 so the FP32 slice is aligned and must not be copied.
    text += b" " * (-len(text) % 4)
    request, body = decode(text, a.tobytes() + b.tobytes())
    x, j, flags = (t.array for t in request.inputs)
    np.testing.assert_array_equal(x, a)
    assert np.shares_memory(x, np.frombuffer(body, np.uint8))
    np.testing.assert_array_equal(j, [5, 6])
    np.testing.assert_array_equal(flags, b)
    assert flags.dtype == np.bool_
    assert request.method == "triple" and request.timeout_s == pytest.approx(0.0025)
    assert request.outputs == ["output_0"] and request.id == "r1"


def test_misaligned_slices_are_copied_aligned():
    header = json.dumps(one_input(8, shape=(2,), datatype="FP32")).encode()
    header += b" " * ((-len(header) % 4) + 1)  # one byte past alignment
    request, _ = decode(header, np.array([1.5, 2.5], np.float32).tobytes())
    array = request.inputs[0].array
    assert array.flags.aligned
    np.testing.assert_array_equal(array, [1.5, 2.5])


@pytest.mark.parametrize(
    "datatype,array",
    [
        ("FP16", np.array([1.5, -2.25, 65504.0], np.float16)),
        ("INT8", np.array([-128, 0, 127], np.int8)),
        ("UINT8", np.array([0, 200, 255], np.uint8)),
        ("INT16", np.array([-32768, 1, 32767], np.int16)),
        ("INT32", np.array([-1, 0, 2**31 - 1], np.int32)),
        ("INT64", np.array([-(2**63), 0, 2**63 - 1], np.int64)),
        ("FP64", np.array([1e300, -0.0, np.inf], np.float64)),
    ],
)
def test_every_datatype_decodes_from_little_endian_bytes(datatype, array):
    request, _ = decode(
        one_input(array.nbytes, shape=(3,), datatype=datatype),
        array.astype(array.dtype.newbyteorder("<")).tobytes(),
    )
    np.testing.assert_array_equal(request.inputs[0].array, array)


def test_bf16_travels_as_its_bit_patterns():
    values = np.array([1.0, -3.5, 0.15625], np.float32)
    bits = float32_to_bf16_bits(values)
    request, _ = decode(one_input(6, shape=(3,), datatype="BF16"), bits.tobytes())
    np.testing.assert_array_equal(request.inputs[0].array, bits)
    assert bytes(binary.output_bytes(bits)) == bits.tobytes()
    np.testing.assert_array_equal(bf16_bits_to_float32(bits), values)


def test_output_bytes_are_a_view_of_a_contiguous_result():
    result = np.arange(6, dtype=np.float32).reshape(2, 3)
    view = binary.output_bytes(result)
    assert view.nbytes == 24 and bytes(view) == result.tobytes()
    assert bytes(binary.output_bytes(result.T)) == np.ascontiguousarray(result.T).tobytes()
    big_endian = np.array([1, 2], dtype=">i4")
    assert bytes(binary.output_bytes(big_endian)) == np.array([1, 2], "<i4").tobytes()


@pytest.mark.parametrize("length", ["abc", "-1", "1e3", "", "0x10", "٣", "99999999999999999999"])
def test_header_length_that_is_no_count_or_past_the_body(length):
    problem = refused(one_input(16), bytes(16), header_length=length).problems[0]
    assert problem.rule == "binary.header_length"


def test_header_length_larger_than_the_body():
    error = refused(one_input(16), bytes(16), header_length="100000")
    assert "larger than the request body" in error.message


def test_header_that_is_not_json():
    error = refused(b"\x00\xffnot json{", bytes(16))
    assert error.problems[0].rule == "request.json"
    # A header length cutting the JSON in half is not JSON either.
    body, length = body_of(one_input(16), bytes(16))
    with pytest.raises(Invalid) as caught:
        codec.parse_header(bytes(binary.split(body, str(int(length) // 2))[0]))
    assert caught.value.problems[0].rule == "request.json"


@pytest.mark.parametrize("size", [-1, -(2**63), 2**64, 2**70, 10**30, True, 1.5, "16", None])
def test_sizes_negative_overflowing_or_not_integers(size):
    problem = refused(one_input(size), bytes(16)).problems[0]
    assert problem.input == "x" and problem.rule == "binary.size"


def test_size_past_the_end_of_the_body():
    problem = refused(one_input(16), bytes(8)).problems[0]
    assert problem.input == "x" and "runs past the end" in problem.message


def test_second_input_past_the_end_names_that_input():
    header = {
        "inputs": [
            one_input(16, name="first")["inputs"][0],
            one_input(16, name="second")["inputs"][0],
        ]
    }
    problem = refused(header, bytes(24)).problems[0]
    assert problem.input == "second"


@pytest.mark.parametrize("shape,size", [((2, 2), 12), ((2, 2), 20), ((3,), 16), ((0,), 4)])
def test_size_not_matching_shape_times_itemsize(shape, size):
    problem = refused(one_input(size, shape=shape), bytes(size)).problems[0]
    assert problem.input == "x" and "does not match shape" in problem.message


def test_huge_shape_does_not_allocate():
    problem = refused(one_input(16, shape=(2**40, 2**40)), bytes(16)).problems[0]
    assert problem.input == "x" and problem.rule == "input.shape"
    assert f"dimension {2**40}" in problem.message


@pytest.mark.parametrize("shape", [[-1, 4], [2.0, 2], "2,2", [True, 4], None])
def test_shapes_that_are_not_lists_of_counts(shape):
    problem = refused(
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": shape,
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": 16},
                }
            ]
        },
        bytes(16),
    ).problems[0]
    assert problem.input == "x" and problem.rule == "input.shape"


def test_bytes_datatype_is_refused_clearly():
    error = refused(one_input(4, shape=(1,), datatype="BYTES"), bytes(4))
    assert error.problems[0].input == "x" and "BYTES is not supported" in error.message


def test_unknown_datatype():
    assert refused(one_input(4, shape=(1,), datatype="FP8"), bytes(4)).problems[0].input == "x"


def test_bool_bytes_other_than_zero_or_one():
    problem = refused(one_input(2, shape=(2,), datatype="BOOL"), b"\x01\x02").problems[0]
    assert problem.input == "x" and problem.rule == "binary.bool"


def test_binary_input_without_the_header_length():
    with pytest.raises(Invalid) as caught:
        codec.to_request("m", None, codec.parse_header(json.dumps(one_input(16)).encode()), None)
    assert caught.value.problems[0].input == "x"


def test_bytes_no_input_claims():
    error = refused(one_input(16), bytes(20))
    assert "4 byte(s) of binary data follow" in error.message


def test_data_and_binary_size_together_or_neither():
    both = one_input(16, data=[1, 2, 3, 4])
    assert refused(both, bytes(16)).problems[0].rule == "input.data"
    neither = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32"}]}
    assert refused(neither).problems[0].input == "x"


@pytest.mark.parametrize(
    "header",
    [
        [],
        {"inputs": []},
        {"inputs": "x"},
        {"inputs": [5]},
        {"inputs": [{"shape": [1]}]},
        {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}], "id": 5},
        {
            "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}],
            "parameters": {"timeout": -5},
        },
        {
            "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}],
            "parameters": {"binary_data_output": "yes"},
        },
        {
            "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}],
            "outputs": [{"name": "y", "parameters": {"classification": 3}}],
        },
        {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}], "outputs": {}},
        {"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1]}]},
    ],
)
def test_malformed_headers_are_invalid(header):
    refused(header)


def test_deeply_nested_json_is_invalid_not_a_crash():
    refused(b"[" * 100_000 + b"]" * 100_000)
