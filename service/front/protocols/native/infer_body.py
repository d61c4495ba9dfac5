"""The native /infer body: JSON parsed by orjson, its envelope checked by hand, tensors decoded.

Tensor data never goes through pydantic: a model object per value cost more than running a small
program (issue 10's profile). The envelope is checked here with pydantic's own messages under the
rule `request.invalid`, so clients get the same 422 bodies as when pydantic checked it; schema.py
still documents the body.
"""

from __future__ import annotations

import json

import numpy as np
import orjson

from service import oip, rules
from service.dataplane.types import Tensor
from service.errors import Invalid, Problem, clip
from service.front.protocols import json_spans, json_tensors

_MISSING = object()
_OBJECT = "Input should be a valid dictionary or object to extract fields from"
_STRING = "Input should be a valid string"
_LIST = "Input should be a valid list"
_INTEGER = "Input should be a valid integer"
_REQUIRED = "Field required"


class _Problems(list):
    def add(self, location: str, message: str, where: str | None = None) -> None:
        self.append(Problem(None, rules.REQUEST_INVALID, f"{location}: {message}", input=where))

    def field(
        self,
        body: dict,
        key: str,
        location: str,
        kind: type,
        message: str,
        where: str | None = None,
        default=_MISSING,
    ):
        value = body.get(key, default)
        if value is _MISSING:
            self.add(location, _REQUIRED, where)
        elif not isinstance(value, kind):
            self.add(location, message, where)
        return value


def _check_input(problems: _Problems, index: int, item) -> None:
    where, location = f"input_{index}", f"inputs.{index}"
    if not isinstance(item, dict):
        problems.add(location, _OBJECT, where)
        return
    name = item.get("name")
    if name is not None and not isinstance(name, str):
        problems.add(f"{location}.name", _STRING, where)
    shape = problems.field(item, "shape", f"{location}.shape", list, _LIST, where)
    if isinstance(shape, list):
        for position, size in enumerate(shape):
            # JSON has one number type: 3.0 is an integer to JSON Schema and to pydantic.
            if type(size) is float and size.is_integer():
                shape[position] = int(size)
            elif type(size) is not int:
                problems.add(f"{location}.shape.{position}", _INTEGER, where)
    problems.field(item, "datatype", f"{location}.datatype", str, _STRING, where)
    problems.field(item, "data", f"{location}.data", (list, np.ndarray), _LIST, where)


def _loads(body: bytes):
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:  # NaN and Infinity literals, which Python's json writes and orjson refuses
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        message = "body: JSON decode error" if body.strip() else "body: Field required"
        raise Invalid(
            "invalid request",
            [Problem(None, rules.REQUEST_INVALID, f"{message} ({clip(str(exc))})")],
        ) from None


def parse(body: bytes) -> tuple[str, str, list[Tensor], tuple[str, str] | None]:
    """(model, method, input tensors, None), or Invalid naming every envelope problem at once.
    For an input that cannot be decoded: (model, method, [], (its label, why)), refused by the
    caller once it knows the model exists (an unknown model is answered 404 first, whatever its
    inputs; the refusal crosses from a worker process as plain values)."""
    problems = _Problems()
    # A large body's plain numeric tensors are read without a Python object per number.
    document = json_spans.loads(body, _loads)
    if not isinstance(document, dict):
        problems.add("body", _OBJECT)
        raise Invalid("invalid request", problems)
    model = problems.field(document, "model", "model", str, _STRING)
    method = problems.field(document, "method", "method", str, _STRING, default=oip.DEFAULT_METHOD)
    inputs = problems.field(document, "inputs", "inputs", list, _LIST)
    if isinstance(inputs, list):
        for index, item in enumerate(inputs):
            _check_input(problems, index, item)
    if problems:
        raise Invalid("invalid request", problems)
    tensors = []
    for index, item in enumerate(inputs):
        name = item.get("name")
        label = clip(name) if name is not None else f"input_{index}"
        try:
            array = json_tensors.decode(item["datatype"], item["shape"], item["data"], label)
        except json_tensors.CodecError as exc:
            return model, method, [], (label, str(exc))
        tensors.append(Tensor(name, item["datatype"], array))
    return model, method, tensors, None


def dump(model: str, method: str, outputs: list[Tensor]) -> bytes:
    return json_tensors.dumps(
        {
            "model": model,
            "method": method,
            "outputs": [json_tensors.encode_numpy(t.array, t.name, t.datatype) for t in outputs],
        }
    )
