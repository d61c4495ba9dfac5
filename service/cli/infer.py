"""`etrt infer`: one request over the Open Inference Protocol's binary tensor extension.

Inputs come from .npy files (their dtype and shape as saved) or .json files (a nested list, cast
to the datatype the model's metadata declares, or the native API's {"shape", "datatype",
"data"}); tensors travel as raw bytes, so an image costs its bytes and not five times them as
JSON text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from service.cli.client import Server
from service.dtypes import BY_DATATYPE, BY_NAME

HEADER_LENGTH = "Inference-Header-Content-Length"


@dataclass
class Tensor:
    name: str
    datatype: str
    array: np.ndarray


def _datatype_of(array: np.ndarray) -> str:
    entry = BY_NAME.get(array.dtype.name)
    if entry is None or entry.datatype is None:
        raise ValueError(f"numpy dtype {array.dtype} has no Open Inference Protocol datatype")
    return entry.datatype


def read_input(path: Path, name: str, declared: str | None) -> Tensor:
    """One input file as a tensor named `name`; `declared` is the model's datatype for it."""
    if path.suffix.lower() == ".npy":
        array = np.load(path, allow_pickle=False)
        return Tensor(name, _datatype_of(array), np.ascontiguousarray(array))
    if path.suffix.lower() != ".json":
        raise ValueError(f"{path}: inputs are .npy or .json files")
    content = json.loads(path.read_text())
    if isinstance(content, dict):
        datatype = content["datatype"]
        array = np.asarray(content["data"], dtype=BY_DATATYPE[datatype].carrier)
        return Tensor(name, datatype, array.reshape(content["shape"]))
    datatype = declared or "FP32"
    return Tensor(name, datatype, np.asarray(content, dtype=BY_DATATYPE[datatype].carrier))


def model_inputs(server: Server, model: str) -> list[dict]:
    return server.request("GET", f"/v2/models/{model}").json().get("inputs", [])


def parse_inputs(specs: list[str], metadata: list[dict]) -> list[Tensor]:
    """`--input` values: `FILE` (inputs in the model's order) or `NAME=FILE`."""
    declared = {entry["name"]: entry.get("datatype") for entry in metadata}
    order = [entry["name"] for entry in metadata]
    tensors = []
    for position, spec in enumerate(specs):
        name, _, file = spec.rpartition("=")
        if not name:
            name = order[position] if position < len(order) else f"input_{position}"
        tensors.append(read_input(Path(file), name, declared.get(name)))
    return tensors


def request_body(tensors: list[Tensor], method: str | None) -> tuple[bytes, int]:
    """(body, JSON header length) of a binary v2 request asking for binary outputs."""
    header = {
        "inputs": [
            {
                "name": t.name,
                "shape": list(t.array.shape),
                "datatype": t.datatype,
                "parameters": {"binary_data_size": t.array.nbytes},
            }
            for t in tensors
        ],
        "parameters": {"binary_data_output": True},
    }
    if method:
        header["parameters"]["method"] = method
    head = json.dumps(header).encode()
    return head + b"".join(t.array.tobytes() for t in tensors), len(head)


def decode_outputs(body: bytes, header_length: int | None) -> list[Tensor]:
    if header_length is None:
        header, raw = json.loads(body), b""
    else:
        header, raw = json.loads(body[:header_length]), body[header_length:]
    tensors, offset = [], 0
    for entry in header.get("outputs", []):
        carrier = BY_DATATYPE[entry["datatype"]].carrier
        size = (entry.get("parameters") or {}).get("binary_data_size")
        if size is None:
            array = np.asarray(entry["data"], dtype=carrier)
        else:
            array = np.frombuffer(raw[offset : offset + size], dtype=carrier)
            offset += size
        tensors.append(Tensor(entry["name"], entry["datatype"], array.reshape(entry["shape"])))
    return tensors


def infer(server: Server, model: str, specs: list[str], method: str | None) -> list[Tensor]:
    tensors = parse_inputs(specs, model_inputs(server, model))
    body, head = request_body(tensors, method)
    response = server.request(
        "POST",
        f"/v2/models/{model}/infer",
        content=body,
        headers={HEADER_LENGTH: str(head), "Content-Type": "application/octet-stream"},
    )
    length = response.headers.get(HEADER_LENGTH)
    return decode_outputs(response.content, None if length is None else int(length))
