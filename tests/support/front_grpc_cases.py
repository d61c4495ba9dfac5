"""Generated gRPC ModelInfer messages for the differential test of the fronts' two paths
(tests/unit/test_front_grpc_differential.py): mostly messages the native path should take,
written in the ways protobuf allows (field order, inputs in any order, shapes packed or one per
field, an explicit empty string, non-minimal varints), and a share of changed ones (unknown
models, versions, methods, datatypes, shapes, byte counts, typed contents, parameters, outputs
asked for, BOOL bytes past 1, ids that are not ASCII, repeated fields, unknown fields, flipped
bytes, truncations), so that both sides see what a client may send. `grpc_case(rng)` gives
(message bytes, what was done to it, as a label)."""

from __future__ import annotations

import random
import struct

import numpy as np

from support.front_cases import answer_array
from support.front_reference import TABLE

_LENGTH_DELIMITED = 2
# What the servicer serves and the native path leaves to it by design (grpc_infer.h).
NATIVE_DECLINES = (
    "an id not printable ASCII",
    "BOOL byte past 1",
    "an unknown field",  # the servicer ignores it
    "a field given twice",  # the servicer keeps the last
    "request parameters",  # a method other than forward is named by one
    "bytes flipped",  # into any of the above
    "truncated",  # an empty tensor left without raw contents has typed ones (none)
    "another tensor parameter",  # the servicer reads the shared memory ones only
)


def _varint(value: int, padding: int = 0) -> bytes:
    """`value` as a varint, with `padding` extra continuation bytes (still the same value)."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value or padding:
            out.append(byte | 0x80)
            if not value:
                padding -= 1
                while padding:
                    out.append(0x80)
                    padding -= 1
                out.append(0)
                return bytes(out)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | _LENGTH_DELIMITED) + _varint(len(payload)) + payload


def _shape(dims: list[int], rng: random.Random) -> bytes:
    if not dims:
        return b""
    if rng.random() < 0.8:
        return _field(3, b"".join(_varint(d) for d in dims))  # packed, as proto3 writes it
    return b"".join(_varint(3 << 3) + _varint(d, rng.choice([0, 0, 1])) for d in dims)


def _parameter(key: str, value) -> bytes:
    """One map<string, InferParameter> entry; `value` a str, an int (int64_param), or
    ("uint", n), ("bool", b), ("double", x) for the other choices."""
    if isinstance(value, str):
        choice = _field(3, value.encode())
    elif isinstance(value, int):
        choice = _varint(2 << 3) + _varint(value & (2**64 - 1))
    elif value[0] == "uint":
        choice = _varint(5 << 3) + _varint(value[1])
    elif value[0] == "bool":
        choice = _varint(1 << 3) + _varint(int(value[1]))
    else:
        choice = _varint(4 << 3 | 1) + struct.pack("<d", value[1])
    return _field(1, key.encode()) + _field(2, choice)


def _region(
    name: str, nbytes: int, rng: random.Random, labels: list[str], output: bool = False
) -> list[bytes]:
    """A tensor's shared memory parameters (tritonclient's set_shared_memory), sometimes odd."""
    entries = {"shared_memory_region": name, "shared_memory_byte_size": nbytes}
    if rng.random() < 0.3:
        entries["shared_memory_offset"] = rng.choice([0, 256, 4096])
    r = rng.random()
    if r < 0.1:
        entries["shared_memory_byte_size"] = ("uint", nbytes)
    elif r < 0.14:
        entries["shared_memory_byte_size"] = nbytes + rng.choice([-1, 1, 4])
        labels.append("a region byte size other than the tensor's")
    elif r < 0.17:
        entries["shared_memory_byte_size"] = rng.choice([str(nbytes), ("bool", True), -1])
        labels.append("a region byte size of another type")
    elif r < 0.19:
        del entries["shared_memory_byte_size"]
        labels.append("no region byte size")
    elif r < 0.21:
        entries["shared_memory_region"] = ""
        labels.append("an empty region name")
    elif r < 0.23:
        entries["binary_data_size"] = nbytes  # an input's is read and ignored, as by the servicer
        if output:
            labels.append(NATIVE_DECLINES[7])
    keys = list(entries)
    rng.shuffle(keys)
    return [_parameter(key, entries[key]) for key in keys]


def _binary_data_size(nbytes: int, rng: random.Random, labels: list[str]) -> bytes:
    """An input's binary_data_size parameter: usually its byte count; any non-negative integer is
    ignored by both readers, any other value is the servicer's to judge."""
    r = rng.random()
    if r < 0.6:
        return _parameter("binary_data_size", nbytes)
    if r < 0.75:
        return _parameter("binary_data_size", rng.choice([0, nbytes + 1, ("uint", nbytes)]))
    labels.append(NATIVE_DECLINES[7])
    return _parameter(
        "binary_data_size", rng.choice([str(nbytes), ("bool", True), -1, ("double", 1.0)])
    )


def _input(name: str, datatype: str, dims: list[int], rng: random.Random, parameters=()) -> bytes:
    parts = [_field(1, name.encode()), _field(2, datatype.encode()), _shape(dims, rng)]
    parts += [_field(4, entry) for entry in parameters]
    if rng.random() < 0.1:
        rng.shuffle(parts)
    return b"".join(parts)


def _dims(spec, rng: random.Random) -> list[int]:
    return [rng.randint(0, min(bound, 3)) if spec.dynamic else bound for bound in spec.shape]


def _changed(dims: list[int], datatype: str, rng: random.Random) -> tuple[list[int], str, str]:
    r = rng.random()
    if r < 0.3 and dims:
        dims = list(dims)
        dims[rng.randrange(len(dims))] += rng.choice([1, -1, 5, 2**31])
        return [max(d, 0) for d in dims], datatype, "a dimension changed"
    if r < 0.5:
        return dims + [1], datatype, "a dimension more"
    if r < 0.7:
        return dims, rng.choice(["FP32", "INT64", "UINT8", "BOOL", "fp32", "BYTES", ""]), "datatype"
    return dims[:-1], datatype, "a dimension less"


def grpc_case(rng: random.Random) -> tuple[bytes, str]:
    entry = rng.choice(TABLE)
    method = "forward" if rng.random() < 0.95 else rng.choice(list(entry.methods))
    signature = entry.methods.get(method, entry.methods["forward"]).signature
    labels = []
    fields = [_field(1, entry.model.encode())]
    versioned = not entry.default or rng.random() < 0.3
    if versioned:
        fields.append(_field(2, entry.version.encode()))
    if rng.random() < 0.4:
        request_id = rng.choice(["q7", "a b", "x" * 40, "é", "\n", "1"])
        fields.append(_field(3, request_id.encode()))
        if not request_id.isascii() or not request_id.isprintable():
            labels.append(NATIVE_DECLINES[0])
    if rng.random() < 0.03:
        fields.append(_field(2, b""))  # an explicit empty version: the default
        labels.append(NATIVE_DECLINES[3] if versioned else "an empty version")
    if method != "forward":  # named by the request's parameters
        value = _field(3, method.encode())  # InferParameter.string_param
        fields.append(_field(4, _field(1, b"method") + _field(2, value)))
        labels.append(f"method {method} in the {NATIVE_DECLINES[4]}")
    inputs, raws = [], []
    for spec in signature.inputs:
        dims, datatype = _dims(spec, rng), spec.datatype
        if rng.random() < 0.05:
            dims, datatype, label = _changed(dims, datatype, rng)
            labels.append(label)
        if int(np.prod(dims, dtype=object)) > 1 << 16:  # a byte count no message carries
            dims = [min(d, 8) for d in dims]
        raw = answer_array(spec.datatype, dims, rng).tobytes()
        if datatype == "BOOL" and rng.random() < 0.1 and raw:
            raw = bytes([rng.choice([2, 255])]) + raw[1:]
            labels.append(NATIVE_DECLINES[1])
        if rng.random() < 0.02:
            raw = raw[:-1] if raw else b"\0"
            labels.append("a byte count off by one")
        parameters = ()
        if rng.random() < 0.15:  # its bytes in a client's region: no raw contents for it
            parameters = _region(f"in_{spec.name}", len(raw), rng, labels)
            raw = None
        elif rng.random() < 0.1:  # its byte count, as KServe's client sends it: ignored
            parameters = [_binary_data_size(len(raw), rng, labels)]
        inputs.append(_input(spec.name, datatype, dims, rng, parameters))
        raws.append(raw)
    order = list(range(len(inputs)))
    if rng.random() < 0.3:
        rng.shuffle(order)
        labels.append("inputs in another order")
    fields += [_field(5, inputs[i]) for i in order]
    if rng.random() < 0.3:
        names = [s.name for s in signature.outputs]
        asked = sorted(rng.sample(names, rng.randint(1, len(names))), key=names.index)
        if rng.random() < 0.1:
            rng.shuffle(asked)
            labels.append("outputs in another order")
        for name in asked:
            entries = b""
            if rng.random() < 0.25:  # written into a client's region
                nbytes = rng.choice([4, 64, 1 << 20])
                entries = b"".join(
                    _field(2, e) for e in _region(f"out_{name}", nbytes, rng, labels, True)
                )
            fields.append(_field(6, _field(1, name.encode()) + entries))
    raw_fields = [_field(7, raws[i]) for i in order if raws[i] is not None]
    if rng.random() < 0.5:
        fields += raw_fields
    else:  # raw contents anywhere among the other fields
        for field in raw_fields:
            fields.insert(rng.randint(1, len(fields)), field)
    message = b"".join(fields)
    return _mutated(message, rng, labels)


def _mutated(message: bytes, rng: random.Random, labels: list[str]) -> tuple[bytes, str]:
    r = rng.random()
    if r < 0.03:
        message += _field(4, _field(1, b"timeout") + _field(2, b"\x10\x05"))  # int64_param
        labels.append("a request parameter")
    elif r < 0.05:
        message += _field(5, _field(1, b"input_0") + _field(4, _field(1, b"binary_data_size")))
        labels.append("an input with parameters")
    elif r < 0.07:
        message += _field(1, b"tiny")
        labels.append(NATIVE_DECLINES[3])
    elif r < 0.09:
        message += _varint(15 << 3 | 0) + _varint(1)
        labels.append(NATIVE_DECLINES[2])
    elif r < 0.11:
        message = message[: rng.randrange(len(message))]
        labels.append(NATIVE_DECLINES[6])
    elif r < 0.14:
        flipped = bytearray(message)
        for _ in range(rng.randint(1, 3)):
            flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        message = bytes(flipped)
        labels.append(NATIVE_DECLINES[5])
    elif r < 0.15:
        message += _field(7, b"\0\0\0\0")
        labels.append("a raw entry too many")
    elif r < 0.16:
        message = _field(1, b"nope") + message[message.index(b"\x2a") :]
        labels.append("an unknown model")
    return message, ", ".join(labels) or "plain"
