"""Inference requests and responses of the REST protocol <-> the dataplane's typed tensors.

`parse_header` (JSON text -> checked header with JSON tensors decoded) and `dump_response` (header
+ JSON output arrays -> text) are the GIL-holding parts; they are plain functions of picklable
values so that large bodies can run them in a worker process (offload.py). This module therefore
imports nothing heavier than numpy and the codec helpers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import orjson

from service import oip, rules
from service.dataplane.types import InferRequest, InferResponse, Tensor
from service.errors import clip, input_problem, invalid
from service.front.protocols import json_spans, json_tensors
from service.front.protocols.v2_rest import binary
from service.shm import refs as shm_refs

# Request parameters this protocol interprets; any other is passed to the dataplane unchanged.


@dataclass
class ParsedInput:
    name: str
    datatype: str
    shape: list
    binary_size: int | None
    array: np.ndarray | None  # decoded from JSON; None for binary inputs
    shm: shm_refs.ShmRef | None = None  # its bytes are in a shared memory region


@dataclass
class ParsedRequest:
    id: str | None
    parameters: dict
    inputs: list[ParsedInput]
    # (name, binary_data) per requested output; None: all outputs
    outputs: list[tuple[str, bool | None]] | None = None
    method: str = oip.DEFAULT_METHOD
    timeout_s: float | None = None
    binary_output: bool = False
    extra: dict = field(default_factory=dict)
    # Outputs to be written into shared memory regions, by name.
    shm_outputs: dict = field(default_factory=dict)


def _unicode_error(value: str) -> UnicodeEncodeError | None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc
    return None


def _text(value: str, what: str, input_label: str | None = None) -> str:
    """`value`, refused when it holds a lone surrogate (JSON's "\\ud800" escapes allow one):
    such a string cannot be echoed in an answer or written to a log as UTF-8."""
    error = _unicode_error(value)
    if error is None:
        return value
    message = f"{what} is not valid Unicode: a lone surrogate at character {error.start}"
    if input_label is None:
        raise invalid(rules.REQUEST_UNICODE, message)
    raise input_problem(input_label, rules.REQUEST_UNICODE, message)


def _check_texts(value, what: str, input_label: str | None = None) -> None:
    """Every key and string in a (small) parameters object, as _text checks them."""
    if isinstance(value, str):
        _text(value, what, input_label)
    elif isinstance(value, dict):
        for key, item in value.items():
            _text(key, f"{what}: a key", input_label)
            _check_texts(item, f"{what} {clip(key)!r}", input_label)
    elif isinstance(value, list):
        for item in value:
            _check_texts(item, what, input_label)


def _object(value, what: str, input_label: str | None = None) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid(rules.REQUEST_INVALID, f"{what} must be a JSON object")
    _check_texts(value, what, input_label)
    return value


def _flag(parameters: dict, key: str, what: str) -> bool | None:
    value = parameters.get(key)
    if value is not None and not isinstance(value, bool):
        raise invalid(rules.REQUEST_PARAMETER, f"{what}: parameter {key!r} must be true or false")
    return value


def _input(index: int, item) -> ParsedInput:
    if not isinstance(item, dict):
        raise input_problem(
            f"input_{index}", rules.REQUEST_INVALID, f"inputs[{index}] must be an object"
        )
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise input_problem(
            f"input_{index}", rules.INPUT_NAME, f"inputs[{index}] needs a 'name' (a string)"
        )
    _text(name, f"inputs[{index}] 'name'", f"input_{index}")
    label = clip(name)
    datatype = item.get("datatype")
    binary.check_datatype(label, datatype)
    parameters = _object(item.get("parameters"), f"input {label!r} 'parameters'", label)
    size = binary.binary_size(label, parameters)
    shape = item.get("shape")
    shm = shm_refs.parse(name, parameters)
    if shm is not None:
        if size is not None or "data" in item:
            raise input_problem(
                label,
                "input.data",
                f"input {label!r} is in shared memory region {clip(shm.region)!r} and also "
                "has data in the request; send one or the other",
            )
        return ParsedInput(name, datatype, binary.check_shape(label, shape), None, None, shm)
    if size is not None:
        if "data" in item:
            raise input_problem(
                label, rules.INPUT_DATA, f"input {label!r} has both 'data' and binary_data_size"
            )
        return ParsedInput(name, datatype, binary.check_shape(label, shape), size, None)
    if "data" not in item:
        raise input_problem(
            label, rules.INPUT_DATA, f"input {label!r} has neither 'data' nor binary_data_size"
        )
    try:
        array = json_tensors.decode(datatype, shape, item["data"], f"input {label!r}")
    except json_tensors.CodecError as exc:
        raise input_problem(label, rules.INPUT_DATA, str(exc)) from None
    return ParsedInput(name, datatype, shape, None, array)


def _outputs(value, shm: dict) -> list[tuple[str, bool | None]] | None:
    """The requested outputs; those to be written into shared memory go into `shm`."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise invalid(rules.REQUEST_INVALID, "'outputs' must be a list")
    outputs = []
    for index, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise invalid(rules.REQUEST_INVALID, f"outputs[{index}] needs a 'name' (a string)")
        _text(item["name"], f"outputs[{index}] 'name'")
        label = f"output {clip(item['name'])!r}"
        parameters = _object(item.get("parameters"), f"{label} 'parameters'")
        if parameters.get("classification") is not None:
            raise invalid(
                rules.OUTPUT_CLASSIFICATION,
                f"{label}: the classification extension is not supported",
            )
        ref = shm_refs.parse(item["name"], parameters, "output")
        if ref is not None:
            shm[item["name"]] = ref
        outputs.append((item["name"], _flag(parameters, oip.BINARY_DATA, label)))
    return outputs


def _document(text: bytes):
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        try:  # NaN/Infinity literals and integers past 64 bits, which orjson refuses
            return json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise invalid(
                rules.REQUEST_JSON, f"the request is not valid JSON: {clip(exc)}"
            ) from None


def parse_header(text: bytes | bytearray) -> ParsedRequest:
    """The request's JSON (the whole body, or the header of a binary one), checked, with its JSON
    tensors decoded; binary inputs keep their declared sizes for `to_request`. A large text's
    plain numeric tensors are read without a Python object per number (json_spans)."""
    header = json_spans.loads(bytes(text) if isinstance(text, bytearray) else text, _document)
    if not isinstance(header, dict):
        raise invalid(rules.REQUEST_INVALID, "the request must be a JSON object")
    request_id = header.get("id")
    if request_id is not None:
        if not isinstance(request_id, str):
            raise invalid(rules.REQUEST_INVALID, "'id' must be a string")
        _text(request_id, "'id'")
    parameters = _object(header.get("parameters"), "'parameters'")
    inputs = header.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise invalid(rules.REQUEST_INVALID, "'inputs' must be a non-empty list")
    parsed = ParsedRequest(
        request_id,
        parameters,
        [_input(i, item) for i, item in enumerate(inputs)],
    )
    parsed.outputs = _outputs(header.get("outputs"), parsed.shm_outputs)
    timeout = parameters.get(oip.TIMEOUT_PARAMETER)
    if timeout is not None:
        if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 0:
            raise invalid(
                rules.REQUEST_PARAMETER,
                "parameter 'timeout' must be a non-negative integer (microseconds)",
            )
        parsed.timeout_s = timeout / 1e6 if timeout else None
    method = parameters.get(oip.METHOD_PARAMETER, oip.DEFAULT_METHOD)
    if not isinstance(method, str):
        raise invalid(rules.REQUEST_PARAMETER, "parameter 'method' must be a string")
    parsed.method = method
    parsed.binary_output = bool(_flag(parameters, oip.BINARY_DATA_OUTPUT, "request"))
    return parsed


def protocol(binary_header: str | None) -> str:
    """The request's protocol as the gate of a full queue shares places out (its two encodings
    apart: service/dataplane/scheduling/gate.py); `binary_header`: its binary.HEADER."""
    return "v2 JSON" if binary_header is None else "v2 binary"


def to_request(
    model: str, version: str | None, parsed: ParsedRequest, payload: memoryview | None
) -> InferRequest:
    """The dataplane request, binary inputs viewed in `payload` in header order."""
    offset = 0
    tensors = []
    shared = shm_refs.SharedTensors(outputs=parsed.shm_outputs)
    for item in parsed.inputs:
        array = item.array
        if item.shm is not None:
            shared.inputs[item.name] = item.shm
            array = shm_refs.placeholder(item.datatype, item.shape)
        elif array is None:
            array = binary.read_input(
                clip(item.name), item.datatype, item.shape, item.binary_size, payload, offset
            )
            offset += item.binary_size
        tensors.append(Tensor(item.name, item.datatype, array))
    binary.check_consumed(payload, offset)
    return InferRequest(
        model=model,
        inputs=tensors,
        method=parsed.method,
        version=version,
        id=parsed.id,
        outputs=None if parsed.outputs is None else [n for n, _ in parsed.outputs],
        parameters=parsed.parameters,
        timeout_s=parsed.timeout_s,
        shared_memory=shared or None,
        protocol=protocol(None if payload is None else ""),
    )


def response_header(
    response: InferResponse, parsed: ParsedRequest
) -> tuple[dict, list[tuple[int, Tensor]], list[memoryview]]:
    """(header without JSON tensor data, outputs to encode as JSON by index, binary parts)."""
    wanted = dict(parsed.outputs or [])
    header = {"model_name": response.model, "model_version": response.version}
    if response.id is not None:
        header["id"] = response.id
    if response.method != oip.DEFAULT_METHOD:
        header["parameters"] = {oip.METHOD_PARAMETER: response.method}
    outputs, as_json, parts = [], [], []
    for index, tensor in enumerate(response.outputs):
        entry = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": list(tensor.array.shape),
        }
        ref = parsed.shm_outputs.get(tensor.name)
        as_binary = wanted.get(tensor.name)
        if as_binary is None:
            as_binary = parsed.binary_output
        if ref is not None:  # written into the region: the answer carries no bytes
            entry["parameters"] = shm_refs.answer_parameters(ref, tensor)
        elif as_binary:
            part = binary.output_bytes(tensor.array)
            entry["parameters"] = {oip.BINARY_DATA_SIZE: part.nbytes}
            parts.append(part)
        else:
            as_json.append((index, tensor))
        outputs.append(entry)
    header["outputs"] = outputs
    return header, as_json, parts


def dump_response(header: dict, as_json: list[tuple[int, np.ndarray, str]]) -> bytes:
    """The header as JSON text with the listed outputs' `data` filled in."""
    for index, array, datatype in as_json:
        header["outputs"][index]["data"] = json_tensors.encode_numpy(array, "", datatype)["data"]
    return json_tensors.dumps(header)
