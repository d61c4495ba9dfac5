"""Large JSON tensor bodies decoded without a Python object per number.

Parsing a 60 MB body whole makes a Python float (24 bytes) and a list slot (8) per number: for
short numbers over ten times the text, and more while numpy converts the list (measured: about
1 GiB in the decoding worker for a 60 MB body). Here each input's flat numeric `data` array is
lifted out of the text before the parse: the rest of the document (names, shapes, parameters)
is parsed as usual with a placeholder in its place, and the array is parsed a few megabytes at a
time (orjson, as the whole text would be), each piece converted into the tensor's dtype at once.
The worker's memory is then the text, the tensors and one piece's objects.

Only what is plainly numbers takes this way: a `data` array of the `inputs` list, flat (no
bracket, quote or brace inside), of a float or a signed integer datatype. Anything else (nested
lists, BOOL, BF16, strings such as "NaN", a value of another type or out of range, a count that
does not match the shape, a placeholder found anywhere else) raises NotPlain and the caller
parses the whole text the usual way, which also gives the usual refusal.
"""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Callable

import numpy as np
import orjson

# Below this a body is parsed whole: lifting costs more than it saves.
LIFT_ABOVE = 1024 * 1024
# Text per piece: its copy and its Python numbers are all that is extra.
_CHUNK = 4 * 1024 * 1024
_DATA_KEY = re.compile(rb'"data"\s*:\s*\[')
_FLOATS = {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}
_INTEGERS = {"INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64}


class NotPlain(Exception):
    """Not for this way: parse the whole text."""


def loads(text: bytes, parse: Callable[[bytes], object]) -> object:
    """`parse(text)`, except that the inputs' plain numeric `data` arrays come back as numpy
    arrays of their datatype, read from the text without a Python object per number."""
    if len(text) <= LIFT_ABOVE or not isinstance(text, bytes):
        return parse(text)
    try:
        return _lifted(text, parse)
    except NotPlain:
        return parse(text)


def _lifted(text: bytes, parse: Callable[[bytes], object]) -> object:
    token = "etrt-lifted-" + secrets.token_hex(8) + "-"
    spans: dict[str, tuple[int, int]] = {}
    parts, position = [], 0
    for found in _DATA_KEY.finditer(text):
        if found.start() < position:
            continue
        start = found.end()
        end = text.find(b"]", start)
        if end < 0 or any(text.find(c, start, end) >= 0 for c in (b"[", b'"', b"{")):
            continue  # nested, or not numbers: left to the parse
        key = f"{token}{len(spans)}"
        spans[key] = (start, end)
        parts += (text[position : found.start()], b'"data":"', key.encode(), b'"')
        position = end + 1
    if not spans:
        raise NotPlain()
    parts.append(text[position:])
    try:
        document = parse(b"".join(parts))
    except Exception:  # refused: the whole text's parse says why, in its own words
        raise NotPlain() from None
    inputs = document.get("inputs") if isinstance(document, dict) else None
    for item in inputs if isinstance(inputs, list) else ():
        if isinstance(item, dict) and isinstance(item.get("data"), str):
            span = spans.pop(item["data"], None)
            if span is not None:
                item["data"] = _decode(text, span, item.get("datatype"), item.get("shape"))
    if spans:  # a placeholder elsewhere (parameters, outputs): not an input's data
        raise NotPlain()
    return document


def _decode(text: bytes, span: tuple[int, int], datatype, shape) -> np.ndarray:
    dtype = _FLOATS.get(datatype) or _INTEGERS.get(datatype)
    if dtype is None or not isinstance(shape, list) or not all(type(d) is int for d in shape):
        raise NotPlain()
    start, end = span
    count = math.prod(shape) if all(d >= 0 for d in shape) else -1
    commas = text.count(b",", start, end)
    empty = not text[start:end].strip()
    if count != (0 if empty else commas + 1):
        raise NotPlain()
    out = np.empty(count, dtype)
    filled = 0
    while start < end:
        stop = text.find(b",", min(start + _CHUNK, end), end)
        stop = end if stop < 0 else stop
        values = _numbers(text[start:stop], dtype)
        if filled + values.size > count:
            raise NotPlain()
        out[filled : filled + values.size] = _checked(values, dtype)
        filled += values.size
        start = stop + 1
    if filled != count:
        raise NotPlain()
    return out.reshape(shape)


def _numbers(chunk: bytes, dtype) -> np.ndarray:
    """The piece's numbers, parsed as JSON, all of the kinds the dtype takes."""
    try:
        values = orjson.loads(b"[" + chunk + b"]")
    except orjson.JSONDecodeError:
        raise NotPlain() from None
    floats = dtype in _FLOATS.values()
    if not set(map(type, values)) <= ({int, float} if floats else {int}):
        raise NotPlain()
    try:
        return np.array(values, np.float64 if floats else np.int64)
    except OverflowError:  # an integer past 64 bits
        raise NotPlain() from None


def _checked(values: np.ndarray, dtype) -> np.ndarray:
    """The values in `dtype`, or NotPlain where the whole parse decides (a value out of range,
    a float that overflowed)."""
    if values.dtype == np.float64:
        if not np.isfinite(values).all():
            raise NotPlain()
        with np.errstate(over="ignore"):
            narrow = values.astype(dtype)
        if not np.isfinite(narrow).all():
            raise NotPlain()
        return narrow
    info = np.iinfo(dtype)
    if values.size and (values.min() < info.min or values.max() > info.max):
        raise NotPlain()
    return values.astype(dtype)
