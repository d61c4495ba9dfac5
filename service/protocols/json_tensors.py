"""Open Inference Protocol tensors (JSON lists + datatype names) to numpy arrays and back.

numpy has no bfloat16, so BF16 travels inside the server as uint16 bit patterns: the upper half
of the float32 with the same value, rounded to nearest-even like PyTorch does. Non-finite floats
are exchanged as the strings "NaN", "Infinity" and "-Infinity" because JSON has no such numbers.
"""
from __future__ import annotations

import math

import numpy as np

from service.dtypes import BY_DATATYPE, datatype_of

BF16 = "BF16"
# OIP datatype -> the native host's dtype name (bfloat16 travels in a uint16 carrier).
DATATYPES = {datatype: entry.name for datatype, entry in BY_DATATYPE.items()}
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class CodecError(ValueError):
    """A request tensor that cannot be decoded; the message names the tensor."""


def float32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    nan = np.isnan(values)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    rounded = rounded.astype(np.uint16)
    rounded[nan] = np.uint16(0x7FC0)
    return rounded


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(
        np.float32)


def _flatten(data, label: str) -> list:
    if not isinstance(data, list):
        raise CodecError(f"{label}: 'data' must be a list")
    flat = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            flat.append(_NON_FINITE.get(item, item) if isinstance(item, str) else item)
        else:
            stack.pop()
    return flat


def _check_values(flat: list, datatype: str, label: str) -> None:
    if datatype == "BOOL":
        wrong = next((v for v in flat if not isinstance(v, bool)), None)
        if wrong is not None:
            raise CodecError(f"{label}: BOOL data must be true/false, found {wrong!r}")
        return
    integral = not datatype.startswith(("FP", "BF"))
    for value in flat:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CodecError(f"{label}: {datatype} data must be numbers, found {value!r}")
        if integral and not (isinstance(value, int) or float(value).is_integer()):
            raise CodecError(f"{label}: {datatype} data must be integers, found {value!r}")
    if integral and flat:
        info = np.iinfo(DATATYPES[datatype])
        low, high = min(flat), max(flat)
        if low < info.min or high > info.max:
            raise CodecError(f"{label}: value {low if low < info.min else high} is outside the "
                             f"{datatype} range [{info.min}, {info.max}]")


def decode(datatype: str, shape, data, label: str) -> np.ndarray:
    """A request tensor as an array of the datatype's numpy dtype (BF16: uint16 bit patterns)."""
    if datatype not in DATATYPES:
        raise CodecError(f"{label}: unknown datatype {datatype!r}; expected one of "
                         f"{', '.join(DATATYPES)}")
    if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise CodecError(f"{label}: 'shape' must be a list of non-negative integers")
    flat = _flatten(data, label)
    count = math.prod(shape)
    if len(flat) != count:
        raise CodecError(f"{label}: shape {shape} needs {count} values, 'data' has {len(flat)}")
    _check_values(flat, datatype, label)
    if datatype == BF16:
        return float32_to_bf16_bits(np.array(flat, dtype=np.float32)).reshape(shape)
    return np.array(flat, dtype=DATATYPES[datatype]).reshape(shape)


def _json_value(value):
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def encode(array: np.ndarray, name: str, datatype: str | None = None) -> dict:
    """A result tensor as an OIP output; `datatype` overrides the array's own (BF16 carriers)."""
    datatype = datatype or datatype_of(array.dtype.name)
    if datatype is None:
        raise CodecError(f"{name}: dtype {array.dtype.name} has no Open Inference Protocol "
                         "datatype")
    values = bf16_bits_to_float32(array) if datatype == BF16 else array
    flat = values.reshape(-1).tolist()
    if values.dtype.kind == "f":
        flat = [_json_value(v) for v in flat]
    return {"name": name, "shape": list(array.shape), "datatype": datatype, "data": flat}
