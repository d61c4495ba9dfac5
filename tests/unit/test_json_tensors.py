import json
import math

import numpy as np
import pytest
import torch

from service.front.protocols import json_tensors as codec


@pytest.mark.parametrize(
    "datatype,values",
    [
        ("BOOL", [True, False, True, True]),
        ("UINT8", [0, 255, 7, 1]),
        ("INT8", [-128, 127, 0, -1]),
        ("INT16", [-32768, 32767, 5, 6]),
        ("INT32", [-(2**31), 2**31 - 1, 0, 3]),
        ("INT64", [-(2**63), 2**63 - 1, 0, 3]),
        ("FP16", [0.5, -2.0, 65504.0, 0.0]),
        ("FP32", [1.5, -2.25, 2.0**100, 0.0]),
        ("FP64", [1e300, -1e-300, 0.1, 2.0]),
    ],
)
def test_round_trip(datatype, values):
    array = codec.decode(datatype, [2, 2], values, "input 0")
    assert array.dtype.name == codec.DATATYPES[datatype] and array.shape == (2, 2)
    encoded = codec.encode(array, "output 0")
    assert encoded == {"name": "output 0", "shape": [2, 2], "datatype": datatype, "data": values}


def test_nested_data_is_accepted():
    assert codec.decode("INT32", [2, 2], [[1, 2], [3, 4]], "x").tolist() == [[1, 2], [3, 4]]


def test_bf16_matches_torch_rounding_both_ways():
    values = [1.0, -2.5, 3.14159, 1e-3, 65504.0, 1.00390625, 1.01171875, 3.0e38]
    bits = codec.decode("BF16", [len(values)], values, "x")
    assert bits.dtype == np.uint16
    expected = torch.tensor(values, dtype=torch.float32).to(torch.bfloat16).view(torch.int16)
    assert bits.tolist() == (expected.numpy().astype(np.uint16)).tolist()
    back = codec.encode(bits, "y", "BF16")
    assert back["datatype"] == "BF16"
    assert back["data"] == torch.tensor(values).to(torch.bfloat16).float().tolist()


def test_bf16_keeps_nan_and_infinities():
    bits = codec.decode("BF16", [3], ["NaN", "Infinity", "-Infinity"], "x")
    assert codec.encode(bits, "y", "BF16")["data"] == ["NaN", "Infinity", "-Infinity"]


def test_non_finite_floats_travel_as_strings():
    array = np.array([math.nan, math.inf, -math.inf, 1.0], dtype=np.float32)
    assert codec.encode(array, "y")["data"] == ["NaN", "Infinity", "-Infinity", 1.0]
    assert np.isnan(codec.decode("FP32", [1], ["NaN"], "x")[0])


@pytest.mark.parametrize(
    "datatype,shape,data,fragment",
    [
        ("FP33", [1], [1.0], "unknown datatype 'FP33'"),
        ("FP32", [2, 2], [1.0, 2.0, 3.0], "needs 4 values, 'data' has 3"),
        ("FP32", [-1], [], "non-negative"),
        ("FP32", [1], ["abc"], "must be numbers"),
        ("INT8", [1], [128], "outside the INT8 range"),
        ("UINT8", [1], [-1], "outside the UINT8 range"),
        ("INT32", [1], [1.5], "must be integers"),
        ("BOOL", [1], [1], "true/false"),
        ("FP32", [1], [True], "must be numbers"),
    ],
)
def test_bad_tensors_name_the_input(datatype, shape, data, fragment):
    with pytest.raises(codec.CodecError) as error:
        codec.decode(datatype, shape, data, "input 3 ('x')")
    assert str(error.value).startswith("input 3 ('x')") and fragment in str(error.value)


def test_dtype_without_datatype_is_refused():
    with pytest.raises(codec.CodecError, match="complex64"):
        codec.encode(np.zeros(1, dtype=np.complex64), "y")


# Hostile tensors (issue 8): every one is a CodecError naming the input, never numpy's own error.
@pytest.mark.parametrize(
    "datatype,shape,data,fragment",
    [
        ("FP32", [1] * 65, [1.0], "65 dimensions"),
        ("FP32", [1] * 17, [1.0], "at most 16"),
        ("FP32", [4611686018427387904, 0], [], "larger than 2147483647"),
        ("FP32", [2147483647, 2147483647, 2147483647, 0], [], "too large"),
        ("FP32", [True, 2], [1.0, 2.0], "non-negative integers"),
        ("FP32", "2", [1.0, 2.0], "non-negative integers"),
        ("FP32", [2], 1.0, "'data' must be a list"),
        ("FP32", [1], [10**400], "outside the FP32 range"),
        ("FP64", [2], [1.0, -(10**400)], "outside the FP64 range"),
        ("FP16", [1], [10**400], "outside the FP16 range"),
        ("BF16", [1], [10**400], "outside the BF16 range"),
        ("FP32", [1], [10**39], "outside the FP32 range"),
        ("FP32", [1], [1e39], "outside the FP32 range"),
        ("FP16", [1], [70000.0], "outside the FP16 range"),
        ("BF16", [1], [3.5e38], "outside the BF16 range"),
        ("INT64", [1], [10**400], "outside the INT64 range"),
        ("INT64", [1], [2.0**63], "outside the INT64 range"),
        ("INT64", [2], [2**63, 1.0], "outside the INT64 range"),
        ("INT32", [1], [1e300], "outside the INT32 range"),
        ("INT32", [1], ["Infinity"], "must be integers"),
        ("INT8", [2], [1, 2.5], "must be integers, found 2.5"),
        ("FP32", [1], [None], "must be numbers"),
        ("FP32", [1], [{"a": 1}], "must be numbers"),
        ("FP32", [1], ["1.5"], "must be numbers"),
        ("BOOL", [2], [True, 0], "true/false"),
        ("FP32", [2], [1.0, [2.0]], "flat or nested exactly as shape"),
    ],
)
def test_hostile_tensors_are_codec_errors_naming_the_input(datatype, shape, data, fragment):
    with pytest.raises(codec.CodecError) as error:
        codec.decode(datatype, shape, data, "input_7")
    assert str(error.value).startswith("input_7: ") and fragment in str(error.value)
    assert len(str(error.value)) < 600  # huge values are clipped, not echoed whole


@pytest.mark.parametrize(
    "shape,data,fragment",
    [
        ([2, 8], [[1.0] * 4] * 4, "found a list of 4 at depth 0 where a list of 2"),
        ([2, 8], [[1.0] * 8, [1.0] * 7], "found a list of 7 at depth 1 where a list of 8"),
        ([2, 2, 2], [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]], "found a list of 4 at depth 1"),
        ([2, 2, 2], [[[1.0, 2.0], [3.0, 4.0]], [5.0, 6.0]], "found 5.0 at depth 2"),
        ([2, 2], [[[1.0, 2.0]], [3.0, 4.0]], "found a list of 1 at depth 1"),
        ([2, 2], [[[1.0], 2.0], [3.0, 4.0]], "flat or nested exactly as shape"),
        ([2, 2], [[1.0, 2.0], 3.0, 4.0], "found a list of 3 at depth 0"),
        ([2, 2], [[1.0, 2.0], [3.0, 4.0], []], "found a list of 3 at depth 0"),
    ],
)
def test_nested_data_must_match_the_shape_exactly(shape, data, fragment):
    with pytest.raises(codec.CodecError, match="input_0") as error:
        codec.decode("FP32", shape, data, "input_0")
    assert fragment in str(error.value)


@pytest.mark.parametrize(
    "shape,data",
    [
        ([2, 8], [[float(i + 8 * r) for i in range(8)] for r in range(2)]),
        ([2, 8], [float(i) for i in range(16)]),
        ([1, 2, 1, 8], [[[[float(i + 8 * r) for i in range(8)]] for r in range(2)]]),
        ([2, 0], [[], []]),
        ([0, 3], []),
        ([], [5.0]),
    ],
)
def test_flat_and_exactly_nested_data_decode_alike(shape, data):
    array = codec.decode("FP32", shape, data, "x")
    assert list(array.shape) == shape and array.dtype == np.float32
    if array.size:
        assert (
            array.reshape(-1).tolist() == np.arange(array.size, dtype=np.float32).tolist()
            or shape == []
        )


def test_infinities_sent_as_strings_are_kept_and_integral_floats_are_integers():
    assert codec.decode("FP16", [2], ["Infinity", "-Infinity"], "x").tolist() == [
        math.inf,
        -math.inf,
    ]
    assert codec.decode("INT64", [3], [2.0, -(2**63), 2**63 - 1], "x").tolist() == [
        2,
        -(2**63),
        2**63 - 1,
    ]
    assert codec.decode("UINT8", [2], [255.0, 0.0], "x").dtype == np.uint8


def test_encode_numpy_writes_the_same_json_as_encode():
    for array, datatype in [
        (np.array([[0.5, -2.0], [3.25, 1e-3]], np.float32), None),
        (np.array([1, -2, 3], np.int64), None),
        (np.array([True, False]), None),
        (np.array([np.nan, np.inf, 1.0], np.float32), None),
        (codec.decode("BF16", [2], [1.5, -2.0], "x"), "BF16"),
    ]:
        fast = json.loads(codec.dumps(codec.encode_numpy(array, "y", datatype)))
        slow = codec.encode(array, "y", datatype)
        assert fast["shape"] == slow["shape"] and fast["datatype"] == slow["datatype"]
        assert [str(v) if isinstance(v, str) else np.float32(v) for v in fast["data"]] == [
            str(v) if isinstance(v, str) else np.float32(v) for v in slow["data"]
        ]
