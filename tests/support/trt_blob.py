"""Writes Torch-TensorRT-layout delegate blobs (TR01/TR02) for tests.

Written from the documented layout (shared/reference/torch-tensorrt-executorch.md), not from
Torch-TensorRT's serializer, so a disagreement between the two would show up as a failing test.
The keyword overrides exist to build the malformed layouts the reader must refuse.
"""

import json
import struct

HEADER_SIZE = 32


def align16(n: int) -> int:
    return (n + 15) // 16 * 16


def metadata(io_bindings, aliased_io=(), engine_key=None, **extra) -> dict:
    """Metadata in the exporter's key order; io_bindings as (name, is_input) pairs or dicts."""
    meta = {
        "io_bindings": [
            b
            if isinstance(b, dict)
            else {"name": b[0], "dtype": None, "shape": None, "is_input": b[1]}
            for b in io_bindings
        ],
        "aliased_io": [
            a if isinstance(a, dict) else {"output": a[0], "input": a[1], "kind": "kv_cache_update"}
            for a in aliased_io
        ],
        "hardware_compatible": extra.pop("hardware_compatible", False),
        "device_id": extra.pop("device_id", 0),
        "serialized_metadata": extra.pop("serialized_metadata", "gASVAAAAAAAAAAB9lC4="),
        "target_platform": extra.pop("target_platform", "linux_x86_64"),
    }
    if engine_key is not None:
        meta["engine_key"] = engine_key
    meta.update(extra)
    return meta


def make_blob(
    meta,
    engine: bytes = b"",
    *,
    magic=None,
    metadata_bytes=None,
    metadata_offset=HEADER_SIZE,
    metadata_size=None,
    engine_offset=None,
    engine_size=None,
    pad_to=None,
) -> bytes:
    """A blob around `meta` (a dict) and `engine`; any header field can be overridden."""
    text = (
        metadata_bytes
        if metadata_bytes is not None
        else json.dumps(meta, separators=(",", ":")).encode()
    )
    if magic is None:
        magic = b"TR02" if isinstance(meta, dict) and meta.get("aliased_io") else b"TR01"
    msize = len(text) if metadata_size is None else metadata_size
    eoff = align16(metadata_offset + len(text)) if engine_offset is None else engine_offset
    esize = len(engine) if engine_size is None else engine_size
    header = magic + struct.pack("<III", metadata_offset, msize, eoff) + struct.pack("<Q", esize)
    header += b"\x01" + b"\x00" * 7
    body = bytearray(header)
    body += b"\x00" * max(0, metadata_offset - len(body))
    body[metadata_offset : metadata_offset + len(text)] = text
    body += b"\x00" * max(0, eoff - len(body))
    body[eoff : eoff + len(engine)] = engine
    if pad_to is not None:
        body += b"\x00" * max(0, pad_to - len(body))
    return bytes(body)


def plan_bytes(op: str, io: list, **extra) -> bytes:
    """A plan for the test engine provider: b"TESTPLAN" + JSON (see test_engine_provider)."""
    return b"TESTPLAN" + json.dumps({"op": op, "io": io, **extra}).encode()


def io(name, is_input, shape, dtype="float32", profile_min=None, profile_max=None) -> dict:
    return {
        "name": name,
        "is_input": is_input,
        "dtype": dtype,
        "shape": list(shape),
        "profile_min": profile_min,
        "profile_max": profile_max,
    }


def plan_blob(op: str, plan_io: list, aliased=(), external_key=None, **extra):
    """(blob, plan) whose bindings follow the plan's I/O; the plan is inline unless external_key."""
    plan = plan_bytes(op, plan_io, **extra)
    meta = metadata(
        [(t["name"], t["is_input"]) for t in plan_io], aliased_io=aliased, engine_key=external_key
    )
    return make_blob(meta, b"" if external_key else plan), plan
