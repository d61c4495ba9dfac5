"""Open Inference Protocol tensors (JSON lists + datatype names) to numpy arrays and back.

numpy has no bfloat16, so BF16 travels inside the server as uint16 bit patterns: the upper half
of the float32 with the same value, rounded to nearest-even like PyTorch does. Non-finite floats
are exchanged as the strings "NaN", "Infinity" and "-Infinity" because JSON has no such numbers.

Decoding checks the value types once over the whole list (a set of Python types, built in C) and
lets numpy convert; the per-value Python loop only runs to name the offending value of a request
that is refused anyway. Every way numpy can fail on client data (a shape too large or too deep,
an integer too large for a float) is turned into a CodecError naming the tensor.
"""

from __future__ import annotations

import math
from itertools import chain

import numpy as np
import orjson

from service.dtypes import BY_DATATYPE, datatype_of
from service.errors import clip
from service.shared.limits import MAX_DIM, MAX_DIMS

BF16 = "BF16"
# OIP datatype -> the native host's dtype name (bfloat16 travels in a uint16 carrier).
DATATYPES = {datatype: entry.name for datatype, entry in BY_DATATYPE.items()}
_CARRIERS = {datatype: entry.carrier for datatype, entry in BY_DATATYPE.items()}
_FLOATS = {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64, BF16: np.float32}
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_NUMBERS = frozenset({int, float})


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
        np.float32
    )


def check_shape(shape, label: str) -> None:
    """Shapes within ExecuTorch's limits, so numpy and the native host never see one that
    they would fail on."""
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise CodecError(f"{label}: 'shape' must be a list of non-negative integers")
    if len(shape) > MAX_DIMS:
        raise CodecError(
            f"{label}: 'shape' has {len(shape)} dimensions; tensors have at most {MAX_DIMS}"
        )
    too_large = next((d for d in shape if d > MAX_DIM), None)
    if too_large is not None:
        raise CodecError(f"{label}: dimension {too_large} in 'shape' is larger than {MAX_DIM}")


def _flat_values(data, shape: list, label: str) -> list:
    """The values in row-major order: `data` is flat, or nested exactly as `shape` says (one
    list per dimension, each of that dimension's length)."""
    if not isinstance(data, list):
        raise CodecError(f"{label}: 'data' must be a list")
    if len(shape) <= 1 or not data or type(data[0]) is not list:
        return data
    level = [data]
    for depth, size in enumerate(shape):
        for item in level:
            if type(item) is not list or len(item) != size:
                found = f"a list of {len(item)}" if type(item) is list else f"{clip(repr(item))}"
                raise CodecError(
                    f"{label}: nested 'data' must match shape {shape}: found {found} "
                    f"at depth {depth} where a list of {size} is expected"
                )
        level = list(chain.from_iterable(level))
    return level


def _first(values: list, wrong) -> object:
    return next(v for v in values if wrong(v))


def _refuse_type(values: list, allowed: frozenset, datatype: str, shape: list, label: str):
    value = _first(values, lambda v: type(v) not in allowed)
    if type(value) is list:
        raise CodecError(f"{label}: 'data' must be flat or nested exactly as shape {shape}")
    if datatype == "BOOL":
        raise CodecError(f"{label}: BOOL data must be true/false, found {clip(repr(value))}")
    raise CodecError(f"{label}: {datatype} data must be numbers, found {clip(repr(value))}")


def _out_of_range(value, datatype: str, label: str, bounds: str = "") -> CodecError:
    return CodecError(f"{label}: value {clip(value)} is outside the {datatype} range{bounds}")


# Values within these bounds convert without overflowing: no check needed (nearly every request).
_IN_RANGE = {name: float(np.finfo(_FLOATS[name]).max) for name in ("FP16", "FP32", "FP64")}


def _floats(values: list, datatype: str, label: str) -> np.ndarray:
    target = _FLOATS[datatype]
    bound = _IN_RANGE.get(datatype)
    if bound is not None and values and -bound <= min(values) and max(values) <= bound:
        return np.array(values, dtype=target)  # NaN passes either way and stays NaN
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            array = np.array(values, dtype=target)
    except OverflowError:  # a Python int beyond any float
        raise _out_of_range(
            max((v for v in values if type(v) is int), key=abs), datatype, label
        ) from None
    if datatype == BF16:
        array = float32_to_bf16_bits(array)
        finite = np.isfinite(bf16_bits_to_float32(array))
    else:
        finite = np.isfinite(array)
    if not finite.all():
        # Infinities sent as "Infinity" stay; a finite number that became one is out of range.
        sent = np.array(values, dtype=np.float64)
        overflowed = ~finite & np.isfinite(sent)
        if overflowed.any():
            raise _out_of_range(values[int(np.argmax(overflowed))], datatype, label)
    return array


def _integers(values: list, kinds: set, datatype: str, label: str) -> np.ndarray:
    info = np.iinfo(_CARRIERS[datatype])
    bounds = f" [{info.min}, {info.max}]"
    if float in kinds:
        try:
            wide = np.array(values, dtype=np.float64)
        except OverflowError:
            raise _out_of_range(
                max((v for v in values if type(v) is int), key=abs), datatype, label, bounds
            ) from None
        with np.errstate(invalid="ignore"):
            fractional = ~np.isfinite(wide) | (wide != np.trunc(wide))
        if fractional.any():
            value = values[int(np.argmax(fractional))]
            raise CodecError(f"{label}: {datatype} data must be integers, found {value!r}")
        if int not in kinds:
            # Python compares floats with ints exactly, so 2**63 as a float is out of INT64.
            low, high = (float(wide.min()), float(wide.max())) if wide.size else (0, 0)
            if low < info.min or high > info.max:
                raise _out_of_range(int(low if low < info.min else high), datatype, label, bounds)
            return wide.astype(_CARRIERS[datatype])
        values = [int(v) for v in values]
    try:
        array = np.array(values, dtype=np.int64)
        low, high = (int(array.min()), int(array.max())) if array.size else (0, 0)
    except OverflowError:
        array, low, high = None, min(values), max(values)
    if low < info.min or high > info.max:
        raise _out_of_range(low if low < info.min else high, datatype, label, bounds)
    return array.astype(_CARRIERS[datatype], copy=False)


def decode(datatype: str, shape, data, label: str) -> np.ndarray:
    """A request tensor as an array of the datatype's numpy dtype (BF16: uint16 bit patterns)."""
    if datatype not in DATATYPES:
        raise CodecError(
            f"{label}: unknown datatype {clip(repr(datatype))}; expected one of "
            f"{', '.join(DATATYPES)}"
        )
    check_shape(shape, label)
    if isinstance(data, np.ndarray):  # read from the text already (json_spans), as `shape`
        return data
    values = _flat_values(data, shape, label)
    count = math.prod(shape)
    if len(values) != count:
        raise CodecError(f"{label}: shape {shape} needs {count} values, 'data' has {len(values)}")
    kinds = set(map(type, values))
    if str in kinds:
        values = [_NON_FINITE.get(v, v) if type(v) is str else v for v in values]
        kinds = set(map(type, values))
    if datatype == "BOOL":
        if kinds - {bool}:
            _refuse_type(values, frozenset({bool}), datatype, shape, label)
        array = np.array(values, dtype=np.bool_)
    else:
        if kinds - _NUMBERS:
            _refuse_type(values, _NUMBERS, datatype, shape, label)
        array = (
            _floats(values, datatype, label)
            if datatype in _FLOATS
            else _integers(values, kinds, datatype, label)
        )
    try:
        return array.reshape(shape)
    except ValueError:  # numpy's own size limits
        raise CodecError(f"{label}: shape {shape} is too large") from None


def _json_value(value):
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _values_and_datatype(array: np.ndarray, name: str, datatype: str | None):
    datatype = datatype or datatype_of(array.dtype.name)
    if datatype is None:
        raise CodecError(
            f"{name}: dtype {array.dtype.name} has no Open Inference Protocol datatype"
        )
    values = bf16_bits_to_float32(array) if datatype == BF16 else array
    return np.ascontiguousarray(values.reshape(-1)), datatype


def encode(array: np.ndarray, name: str, datatype: str | None = None) -> dict:
    """A result tensor as an OIP output; `datatype` overrides the array's own (BF16 carriers)."""
    values, datatype = _values_and_datatype(array, name, datatype)
    flat = values.tolist()
    if values.dtype.kind == "f":
        flat = [_json_value(v) for v in flat]
    return {"name": name, "shape": list(array.shape), "datatype": datatype, "data": flat}


def encode_numpy(array: np.ndarray, name: str, datatype: str | None = None) -> dict:
    """Like encode, but `data` stays a flat ndarray wherever JSON can hold every value, for
    `dumps` to write straight from the buffer (no Python float per value)."""
    values, datatype = _values_and_datatype(array, name, datatype)
    if values.dtype.kind == "f" and not np.isfinite(values).all():
        data = [_json_value(v) for v in values.tolist()]
    else:
        data = values
    return {"name": name, "shape": list(array.shape), "datatype": datatype, "data": data}


def dumps(payload) -> bytes:
    """JSON bytes of a payload whose tensors came from encode_numpy."""
    return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)
