import math

import numpy as np
import pytest
import torch

from service.protocols import json_tensors as codec
@pytest.mark.parametrize("datatype,values", [
    ("BOOL", [True, False, True, True]), ("UINT8", [0, 255, 7, 1]), ("INT8", [-128, 127, 0, -1]),
    ("INT16", [-32768, 32767, 5, 6]), ("INT32", [-(2**31), 2**31 - 1, 0, 3]),
    ("INT64", [-(2**63), 2**63 - 1, 0, 3]), ("FP16", [0.5, -2.0, 65504.0, 0.0]),
    ("FP32", [1.5, -2.25, 2.0**100, 0.0]), ("FP64", [1e300, -1e-300, 0.1, 2.0])])
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


@pytest.mark.parametrize("datatype,shape,data,fragment", [
    ("FP33", [1], [1.0], "unknown datatype 'FP33'"),
    ("FP32", [2, 2], [1.0, 2.0, 3.0], "needs 4 values, 'data' has 3"),
    ("FP32", [-1], [], "non-negative"),
    ("FP32", [1], ["abc"], "must be numbers"),
    ("INT8", [1], [128], "outside the INT8 range"),
    ("UINT8", [1], [-1], "outside the UINT8 range"),
    ("INT32", [1], [1.5], "must be integers"),
    ("BOOL", [1], [1], "true/false"),
    ("FP32", [1], [True], "must be numbers"),
])
def test_bad_tensors_name_the_input(datatype, shape, data, fragment):
    with pytest.raises(codec.CodecError) as error:
        codec.decode(datatype, shape, data, "input 3 ('x')")
    assert str(error.value).startswith("input 3 ('x')") and fragment in str(error.value)


def test_dtype_without_datatype_is_refused():
    with pytest.raises(codec.CodecError, match="complex64"):
        codec.encode(np.zeros(1, dtype=np.complex64), "y")
