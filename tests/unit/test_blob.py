"""The delegate's blob reader (ethost_tensorrt.parse_blob, the same C++ the backend runs) on
every valid layout and every refusal the Torch-TensorRT format reference lists."""

import json
import struct

import ethost_tensorrt
import pytest

from support.trt_blob import make_blob, metadata

ENGINE = b"ftrt" + bytes(range(60))
IO = [("x", True), ("y", True), ("output0", False)]


def parse(blob):
    return ethost_tensorrt.parse_blob(blob)


def refused(blob, reason):
    with pytest.raises(ValueError, match=reason):
        parse(blob)


def test_tr01_inline_engine():
    blob = make_blob(metadata(IO), ENGINE)
    p = parse(blob)
    assert p["magic"] == "TR01"
    assert p["metadata_offset"] == 32
    assert p["engine_offset"] % 16 == 0 and p["engine_offset"] >= 32 + p["metadata_size"]
    assert blob[p["engine_offset"] : p["engine_offset"] + p["engine_size"]] == ENGINE
    assert [(b["name"], b["is_input"]) for b in p["io_bindings"]] == IO
    assert p["aliased_io"] == [] and p["engine_key"] is None
    assert p["device_id"] == 0 and p["hardware_compatible"] is False
    assert p["target_platform"] == "linux_x86_64"
    assert p["serialized_metadata_size"] > 0  # kept as a length, never decoded


def test_tr02_with_aliased_io_and_default_kind():
    meta = metadata(
        [("cache", True), ("x", True), ("cache_out", False)],
        aliased_io=[{"output": "cache_out", "input": "cache"}],
    )
    p = parse(make_blob(meta, ENGINE))
    assert p["magic"] == "TR02"
    assert p["aliased_io"] == [{"output": "cache_out", "input": "cache", "kind": "kv_cache_update"}]


def test_user_alias_kind():
    meta = metadata(
        [("a", True), ("o", False)], aliased_io=[{"output": "o", "input": "a", "kind": "user"}]
    )
    assert parse(make_blob(meta, ENGINE))["aliased_io"][0]["kind"] == "user"


def test_engine_key_without_engine_bytes():
    key = "ab" * 32 + "_trt_engine"
    p = parse(make_blob(metadata(IO, engine_key=key)))
    assert p["engine_key"] == key and p["engine_size"] == 0


def test_metadata_offset_beyond_header_and_trailing_bytes_accepted():
    meta = json.dumps(metadata(IO), separators=(",", ":")).encode()
    blob = make_blob(None, ENGINE, metadata_bytes=meta, metadata_offset=48, pad_to=4096)
    assert parse(blob)["metadata_offset"] == 48


def test_other_metadata_fields_and_unknown_keys():
    meta = metadata(
        IO, hardware_compatible=True, device_id=3, target_platform="linux_aarch64", future_key=[1]
    )
    p = parse(make_blob(meta, ENGINE))
    assert (p["hardware_compatible"], p["device_id"], p["target_platform"]) == (
        True,
        3,
        "linux_aarch64",
    )


def test_json_escapes_in_names():
    meta = metadata([('x\u00e9\\"\ud83d\ude00', True), ("o", False)])
    text = json.dumps(meta, ensure_ascii=True).encode()
    p = parse(make_blob(None, ENGINE, metadata_bytes=text))
    assert p["io_bindings"][0]["name"] == 'x\u00e9\\"\U0001f600'


# ---- refusals listed in the format reference -------------------------------------------------


def test_shorter_than_header():
    refused(make_blob(metadata(IO), ENGINE)[:31], "shorter than its 32-byte header")
    refused(b"", "shorter than")


@pytest.mark.parametrize("magic", [b"TR03", b"TR00", b"XXXX", b"tr01"])
def test_unknown_magic(magic):
    refused(make_blob(metadata(IO), ENGINE, magic=magic), "magic is not TR01 or TR02")


@pytest.mark.parametrize("offset", [0, 16, 31])
def test_metadata_offset_inside_header(offset):
    blob = bytearray(make_blob(metadata(IO), ENGINE))
    struct.pack_into("<I", blob, 4, offset)
    refused(bytes(blob), "inside the 32-byte header")


def test_engine_offset_not_multiple_of_16():
    meta = metadata(IO)
    good = make_blob(meta, ENGINE)
    eoff = struct.unpack_from("<I", good, 12)[0]
    refused(make_blob(meta, ENGINE, engine_offset=eoff + 8), "not a multiple of 16")


def test_metadata_past_end():
    blob = bytearray(make_blob(metadata(IO), ENGINE))
    struct.pack_into("<I", blob, 8, len(blob))  # size alone runs past the end
    refused(bytes(blob), "metadata runs past the end")
    struct.pack_into("<I", blob, 8, 0xFFFFFFFF)  # would wrap a 32-bit sum
    refused(bytes(blob), "metadata runs past the end")
    struct.pack_into("<II", blob, 4, 0xFFFFFFF0, 4)
    refused(bytes(blob), "metadata runs past the end")


def test_engine_past_end():
    meta = metadata(IO)
    refused(make_blob(meta, ENGINE, engine_size=len(ENGINE) + 1), "engine runs past the end")
    refused(make_blob(meta, ENGINE, engine_size=2**64 - 1), "engine runs past the end")
    blob = bytearray(make_blob(meta, ENGINE))
    struct.pack_into("<I", blob, 12, 0xFFFFFFF0)
    refused(bytes(blob), "engine runs past the end")


def test_metadata_ending_after_engine_offset():
    meta = metadata(IO)
    text = json.dumps(meta, separators=(",", ":")).encode()
    blob = make_blob(meta, ENGINE, engine_offset=32 + (len(text) // 16) * 16)
    refused(blob, "metadata ends after engine_offset")


def test_tr02_with_empty_aliased_io():
    refused(
        make_blob(metadata(IO), ENGINE, magic=b"TR02"), "TR02 but its metadata has no aliased_io"
    )


def test_engine_bytes_and_engine_key():
    refused(
        make_blob(metadata(IO, engine_key="k_trt_engine"), ENGINE),
        "engine bytes and also an engine_key",
    )


def test_neither_engine_nor_key():
    refused(make_blob(metadata(IO), b""), "neither engine bytes nor an engine_key")


# ---- malformed metadata ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, reason",
    [
        (b"{", "not valid JSON"),
        (b"[]", "not a JSON object"),
        (b'{"io_bindings": []} x', "not valid JSON"),
        (b'{"io_bindings": [], "io_bindings": []}', "not valid JSON"),
        (b'{"aliased_io": []}', "no io_bindings"),
        (b'{"io_bindings": {}}', "io_bindings is not a list"),
        (b'{"io_bindings": [{"name": "", "is_input": true}]}', "non-empty name"),
        (b'{"io_bindings": [{"is_input": true}]}', "non-empty name"),
        (b'{"io_bindings": [{"name": "x", "is_input": 1}]}', "boolean is_input"),
        (
            b'{"io_bindings": [{"name": "x", "is_input": true}, {"name": "x", "is_input": false}]}',
            "twice",
        ),
        (b'{"io_bindings": [{"name": "x", "is_input": true, "shape": [1.5]}]}', "shape"),
        (b'{"io_bindings": [{"name": "x", "is_input": true}], "device_id": -1}', "device_id"),
        (b'{"io_bindings": [{"name": "x", "is_input": true}], "device_id": "0"}', "device_id"),
        (
            b'{"io_bindings": [{"name": "x", "is_input": true}], "hardware_compatible": 0}',
            "hardware_compatible",
        ),
        (b'{"io_bindings": [{"name": "x", "is_input": true}], "engine_key": ""}', "engine_key"),
        (
            b'{"io_bindings": [{"name": "x", "is_input": true}], "serialized_metadata": 5}',
            "serialized_metadata",
        ),
        (b'{"io_bindings": [{"name": "x\\ud800", "is_input": true}]}', "not valid JSON"),
        (b"[" * 100 + b"]" * 100, "not valid JSON"),
    ],
)
def test_malformed_metadata(text, reason):
    refused(make_blob(None, ENGINE, metadata_bytes=text), reason)


@pytest.mark.parametrize(
    "alias, reason",
    [
        ({"output": "nope", "input": "x"}, "is not an output binding"),
        ({"output": "x", "input": "x"}, "is not an output binding"),
        ({"output": "output0", "input": "output0"}, "is not an input binding"),
        ({"output": "output0", "input": "x", "kind": "other"}, "kind must be"),
        ({"output": "output0"}, "needs string 'output' and 'input'"),
    ],
)
def test_malformed_aliased_io(alias, reason):
    refused(make_blob(metadata(IO, aliased_io=[alias]), ENGINE), reason)


def test_same_input_aliased_twice():
    io = [("x", True), ("o1", False), ("o2", False)]
    refused(
        make_blob(metadata(io, aliased_io=[("o1", "x"), ("o2", "x")]), ENGINE),
        "updates input .x., which another alias updates",
    )
