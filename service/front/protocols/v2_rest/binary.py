"""The binary tensor data extension: a JSON header followed by raw little-endian tensor bytes.

A request or response with binary data carries `Inference-Header-Content-Length: <n>`: the first
n bytes are the JSON header, the rest the tensors' bytes back to back, in the order of the
header's inputs (outputs) that declare `binary_data_size`. Inputs are numpy views of the request
body (no copy) unless the slice is misaligned for its datatype: kernels may assume natural
alignment, so those few are copied. Everything here is a client's bytes: every inconsistency is an
Invalid naming the input and the rule, never an exception the server did not mean.
"""

from __future__ import annotations

import math

import numpy as np

from service import oip, rules
from service.dtypes import BY_DATATYPE
from service.errors import clip, input_problem, invalid
from service.front.protocols import json_tensors

HEADER = oip.BINARY_HEADER


def split(
    body: bytes | bytearray, header_length: str | None
) -> tuple[memoryview, memoryview | None]:
    """(JSON header, binary payload); the payload is None when the header field is absent."""
    view = memoryview(body)
    if header_length is None:
        return view, None
    text = header_length.strip()
    if not (text.isascii() and text.isdigit()):
        raise invalid(
            rules.BINARY_HEADER_LENGTH,
            f"Inference-Header-Content-Length must be a non-negative integer, "
            f"got {clip(header_length)!r}",
        )
    length = int(text)
    if length > len(view):
        raise invalid(
            rules.BINARY_HEADER_LENGTH,
            f"Inference-Header-Content-Length {length} is larger than the "
            f"request body ({len(view)} bytes)",
        )
    return view[:length], view[length:]


def check_shape(label: str, shape) -> list[int]:
    try:
        json_tensors.check_shape(shape, f"input {label!r}")
    except json_tensors.CodecError as exc:
        raise input_problem(label, rules.INPUT_SHAPE, str(exc)) from None
    return shape


def check_datatype(label: str, datatype) -> None:
    if not isinstance(datatype, str):
        raise input_problem(
            label,
            rules.INPUT_DATATYPE,
            f"input {label!r}: 'datatype' must be a string such as \"FP32\", got "
            f"{type(datatype).__name__}",
        )
    if datatype == "BYTES":
        raise input_problem(
            label,
            rules.INPUT_DATATYPE,
            f"input {label!r}: datatype BYTES is not supported by this server "
            f"(ExecuTorch programs take numeric and BOOL tensors)",
        )
    if datatype not in BY_DATATYPE:
        raise input_problem(
            label,
            rules.INPUT_DATATYPE,
            f"input {label!r}: unknown datatype {clip(datatype)!r}; expected one "
            f"of {', '.join(BY_DATATYPE)}",
        )


def binary_size(label: str, parameters: dict) -> int | None:
    """The input's `binary_data_size` parameter, checked; None when it has none."""
    if oip.BINARY_DATA_SIZE not in parameters:
        return None
    size = parameters[oip.BINARY_DATA_SIZE]
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise input_problem(
            label,
            rules.BINARY_SIZE,
            f"input {label!r}: binary_data_size must be a non-negative integer, got {clip(size)!r}",
        )
    return size


def read_input(
    label: str, datatype: str, shape, size: int, payload: memoryview | None, offset: int
) -> np.ndarray:
    """The input's array viewed at `offset` of the payload, after checking that its declared
    size, its shape and the payload agree."""
    check_datatype(label, datatype)
    shape = check_shape(label, shape)
    if payload is None:
        raise input_problem(
            label,
            rules.BINARY_HEADER_LENGTH,
            f"input {label!r} has binary_data_size but the request has no "
            f"Inference-Header-Content-Length header",
        )
    remaining = len(payload) - offset
    if size > remaining:
        raise input_problem(
            label,
            rules.BINARY_SIZE,
            f"input {label!r}: binary_data_size {size} runs past the end of the "
            f"body ({remaining} bytes of binary data left)",
        )
    entry = BY_DATATYPE[datatype]
    count = math.prod(shape)
    if size != count * entry.itemsize:
        raise input_problem(
            label,
            rules.BINARY_SIZE,
            f"input {label!r}: binary_data_size {size} does not match shape "
            f"{shape} of {datatype} ({count} x {entry.itemsize} = "
            f"{count * entry.itemsize} bytes)",
        )
    if datatype == "BOOL":
        raw = np.frombuffer(payload, dtype=np.uint8, count=count, offset=offset)
        if count and int(raw.max()) > 1:
            raise input_problem(
                label, rules.BINARY_BOOL, f"input {label!r}: BOOL bytes must be 0 or 1"
            )
        array = raw.view(np.bool_)
    else:
        array = np.frombuffer(
            payload, dtype=entry.carrier.newbyteorder("<"), count=count, offset=offset
        )
    array = array.reshape(shape)
    return array if array.flags.aligned else array.copy()


def check_consumed(payload: memoryview | None, offset: int) -> None:
    if payload is not None and offset != len(payload):
        raise invalid(
            rules.BINARY_SIZE,
            f"{len(payload) - offset} byte(s) of binary data follow the last "
            f"input's; every byte must belong to an input's binary_data_size",
        )


def output_bytes(array: np.ndarray) -> memoryview:
    """The array's bytes, little-endian and C-ordered, as a view where it already is (flat
    first: memoryview cannot cast a shape with a 0 in it, an empty output)."""
    array = np.ascontiguousarray(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return memoryview(array.reshape(-1)).cast("B")
