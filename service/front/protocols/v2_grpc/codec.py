"""gRPC tensor contents (raw bytes or typed lists) to the dataplane's arrays and back.

Everything here distrusts the client: a shape, datatype or content that does not add up is an
Invalid naming the input (INVALID_ARGUMENT), never an exception from numpy that would surface as
INTERNAL. Raw contents are little-endian and row-major without padding; BOOL is one byte per
element and BF16 two (the uint16 bit patterns the server carries, service.dtypes). Works on the
message fields by duck typing, so it imports no protobuf classes and is tested on plain objects.
"""

from __future__ import annotations

import math

import numpy as np

from service import rules
from service.dtypes import BY_DATATYPE, DATATYPES
from service.errors import Invalid, clip, input_problem, server_fault

# The typed InferTensorContents list that carries each datatype; FP16 and BF16 have none.
_CONTENTS_FIELD = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
}


def _label(name: str) -> str:
    return f"input {clip(name)!r}"


def check_datatype(name: str, datatype: str) -> np.dtype:
    """The little-endian wire dtype of a served datatype."""
    entry = BY_DATATYPE.get(datatype)
    if entry is None:
        raise input_problem(
            clip(name),
            rules.INPUT_DATATYPE,
            f"{_label(name)}: unknown datatype {clip(datatype)!r}; this server "
            f"serves {', '.join(DATATYPES)}",
        )
    return entry.carrier.newbyteorder("<")


def check_shape(name: str, shape) -> tuple[list[int], int]:
    """The shape as ints and its element count (exact: Python ints do not overflow)."""
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise input_problem(
            clip(name),
            rules.INPUT_SHAPE,
            f"{_label(name)}: shape {clip(dims)} has a negative dimension",
        )
    return dims, math.prod(dims)


def _reshape(name: str, flat: np.ndarray, dims: list[int]) -> np.ndarray:
    try:
        return flat.reshape(dims)
    except ValueError as exc:  # more dimensions than numpy allows, or a size it cannot index
        raise input_problem(
            clip(name),
            rules.INPUT_SHAPE,
            f"{_label(name)}: shape {clip(dims)} is not usable: {exc}",
        ) from None


def _native(array: np.ndarray) -> np.ndarray:
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def decode_raw(name: str, datatype: str, shape, raw) -> np.ndarray:
    """One raw_input_contents entry (bytes or a view) as an array over the same memory.

    BOOL bytes other than 0 and 1 mean true, as in C; they are rewritten to 1 because a bool
    holding any other byte is undefined for the kernels that read it.
    """
    wire = check_datatype(name, datatype)
    dims, count = check_shape(name, shape)
    expected = count * wire.itemsize
    if len(raw) != expected:
        raise input_problem(
            clip(name),
            rules.INPUT_SIZE,
            f"{_label(name)}: shape {clip(dims)} of {datatype} needs {expected} "
            f"bytes of raw contents, got {len(raw)}",
        )
    if datatype == "BOOL":
        octets = np.frombuffer(raw, dtype=np.uint8)
        flat = octets != 0 if bool((octets > 1).any()) else octets.view(np.bool_)
    else:
        flat = _native(np.frombuffer(raw, dtype=wire))
    return _reshape(name, flat, dims)


def decode_contents(name: str, datatype: str, shape, contents) -> np.ndarray:
    """An input's typed contents (InferTensorContents) as an array."""
    wire = check_datatype(name, datatype)
    dims, count = check_shape(name, shape)
    field = _CONTENTS_FIELD.get(datatype)
    if field is None:
        raise input_problem(
            clip(name),
            rules.INPUT_CONTENTS,
            f"{_label(name)}: {datatype} has no typed contents; send it in raw_input_contents",
        )
    values = getattr(contents, field)
    if len(values) != count:
        raise input_problem(
            clip(name),
            rules.INPUT_CONTENTS,
            f"{_label(name)}: shape {clip(dims)} needs {count} values in "
            f"contents.{field}, got {len(values)}",
        )
    dtype = np.dtype(wire.newbyteorder("="))
    flat = np.array(values, dtype=np.float64 if dtype.kind == "f" else None)
    if dtype.kind in "iu" and flat.size:
        info = np.iinfo(dtype)
        low, high = int(flat.min()), int(flat.max())
        if low < info.min or high > info.max:
            raise input_problem(
                clip(name),
                rules.INPUT_CONTENTS,
                f"{_label(name)}: value {low if low < info.min else high} is "
                f"outside the {datatype} range [{info.min}, {info.max}]",
            )
    return _reshape(name, flat.astype(dtype), dims)


def decode_inputs(inputs, raw_contents) -> list[tuple[str, str, np.ndarray]]:
    """(name, datatype, array) of each request input, from raw contents or typed contents."""
    if raw_contents:
        if len(raw_contents) != len(inputs):
            raise Invalid(
                f"the request has {len(inputs)} input(s) but {len(raw_contents)} "
                "raw_input_contents entries; send one per input, in the same order"
            )
        typed = next((t.name for t in inputs if t.HasField("contents")), None)
        if typed is not None:
            raise input_problem(
                clip(typed),
                rules.INPUT_CONTENTS,
                f"{_label(typed)}: typed contents in a request that uses "
                "raw_input_contents; use one or the other",
            )
        return [
            (t.name, t.datatype, decode_raw(t.name, t.datatype, t.shape, raw))
            for t, raw in zip(inputs, raw_contents)
        ]
    return [
        (t.name, t.datatype, decode_contents(t.name, t.datatype, t.shape, t.contents))
        for t in inputs
    ]


def encode_raw(name: str, datatype: str | None, array: np.ndarray) -> np.ndarray:
    """An output array laid out as raw_output_contents: flat, contiguous, little-endian (a copy
    only where the array is not already so)."""
    entry = BY_DATATYPE.get(datatype) if datatype else None
    if entry is None:
        raise server_fault(
            f"encoding output {name!r}", f"dtype {array.dtype}, which the protocol cannot carry"
        )
    return np.ascontiguousarray(array, dtype=entry.carrier.newbyteorder("<")).reshape(-1)
