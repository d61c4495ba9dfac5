"""Torch-TensorRT's newer load rules for the delegate blob, at ingest: on blobs written by
Torch-TensorRT's own serializer (read from its wheel, tests/support/torch_tensorrt_serializer.py)
and, for the damaged cases it cannot write, on its output edited by hand.

The delegate's reader (ethost_tensorrt.parse_blob, the C++ the backend loads with) decides; the
ingest check only names the rule of each fault it reports, so these tests go through both.
"""

import itertools
import json
from pathlib import Path

import ethost_tensorrt
import pytest

from service import rules
from service.backends.tensorrt.checks import BLOB_FAULT_RULES, check_tensorrt_delegate
from service.config import Settings
from service.ingest.delegates import IngestContext
from service.ingest.inspection import DelegateInfo, MethodInfo, ProgramInfo
from support import torch_tensorrt_serializer
from support.trt_blob import make_blob

ENGINE = b"ftrt" + bytes(range(60))
TOP_LEVEL = (
    "io_bindings",
    "aliased_io",
    "hardware_compatible",
    "device_id",
    "serialized_metadata",
    "target_platform",
)


@pytest.fixture(scope="module")
def upstream():
    return torch_tensorrt_serializer.load()


@pytest.fixture(autouse=True)
def files_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def upstream_blob(upstream, bindings, aliased=None, engine=ENGINE, **fields) -> bytes:
    """What Torch-TensorRT writes for (name, is_input) bindings and {output: (input, kind)}."""
    meta = upstream.TensorRTBlobMetadata(
        io_bindings=[
            upstream.TensorRTIOBinding(name=name, dtype="float32", shape=[2, 4], is_input=is_input)
            for name, is_input in bindings
        ],
        aliased_io=aliased or {},
        **fields,
    )
    return upstream.serialize_engine(engine, meta)


def metadata_of(blob: bytes) -> dict:
    """The blob's metadata JSON, with its keys in the order they were written."""
    offset, size = int.from_bytes(blob[4:8], "little"), int.from_bytes(blob[8:12], "little")
    return json.loads(blob[offset : offset + size])


def relaid(blob: bytes, meta: dict, engine=ENGINE, sort_keys=False) -> bytes:
    """The blob again around edited metadata, same magic; keys in `meta`'s order (or sorted)."""
    text = json.dumps(meta, separators=(",", ":"), sort_keys=sort_keys).encode()
    return make_blob(None, engine, magic=blob[:4], metadata_bytes=text)


def check(blob: bytes):
    """The ingest check of one delegate whose blob is the whole of model.pte."""
    delegate = DelegateInfo("forward", 0, "TensorRTBackend", blob, 0, [])
    method = MethodInfo("forward", [], [], {}, [delegate], [0])
    Path("model.pte").write_bytes(blob)
    context = IngestContext(
        Settings(allow_unverified_plans=True),
        "model.pte",
        ProgramInfo([method]),
        Path("model.pte"),
        {},
    )
    return check_tensorrt_delegate(delegate, context)


def test_every_fault_of_the_reader_is_a_rule_of_the_catalogue():
    assert set(ethost_tensorrt.blob_faults()) == set(BLOB_FAULT_RULES)
    assert all(rule in rules.CATALOGUE for rule in BLOB_FAULT_RULES.values())


def test_an_upstream_blob_is_read_as_written(upstream):
    blob = upstream_blob(
        upstream,
        [("cache", True), ("x", True), ("cache_out", False), ("output1", False)],
        aliased={"cache_out": ("cache", "kv_cache_update")},
        device_id=1,
        hardware_compatible=True,
        target_platform="linux_x86_64",
    )
    parsed = ethost_tensorrt.parse_blob(blob)
    assert parsed["magic"] == "TR02"
    assert [(b["name"], b["is_input"], b["shape"]) for b in parsed["io_bindings"]] == [
        ("cache", True, [2, 4]),
        ("x", True, [2, 4]),
        ("cache_out", False, [2, 4]),
        ("output1", False, [2, 4]),
    ]
    assert parsed["aliased_io"] == [
        {"output": "cache_out", "input": "cache", "kind": "kv_cache_update"}
    ]
    assert (parsed["device_id"], parsed["hardware_compatible"]) == (1, True)
    report = check(blob)
    assert report.problems == []
    assert report.details["aliased_io"] == parsed["aliased_io"]


def _tricky(upstream) -> bytes:
    """Key names used as values: a binding named device_id, an output named aliased_io, a
    platform spelled like a key; a device other than 0 and a user alias, which an
    order-dependent reader lost ("no aliases and device 0 while parsing clean")."""
    return upstream_blob(
        upstream,
        [("device_id", True), ("hardware_compatible", True), ("aliased_io", False)],
        aliased={"aliased_io": ("device_id", "user")},
        device_id=3,
        hardware_compatible=True,
        serialized_metadata="io_bindings",
        target_platform="device_id",
    )


def test_every_order_of_the_metadata_keys_reads_the_same(upstream):
    blob = _tricky(upstream)
    meta = metadata_of(blob)
    assert tuple(meta) == TOP_LEVEL  # as the exporter writes them
    expected = ethost_tensorrt.parse_blob(blob)
    assert expected["device_id"] == 3 and expected["aliased_io"][0]["kind"] == "user"
    for order in itertools.permutations(TOP_LEVEL):
        permuted = relaid(blob, {key: meta[key] for key in order})
        read = ethost_tensorrt.parse_blob(permuted)
        assert {k: v for k, v in read.items() if k != "engine_offset"} == {
            k: v for k, v in expected.items() if k != "engine_offset"
        }, order


def test_sorted_keys_everywhere_read_the_same_at_ingest(upstream):
    blob = _tricky(upstream)
    sorted_blob = relaid(blob, metadata_of(blob), sort_keys=True)
    assert list(metadata_of(sorted_blob)) == sorted(TOP_LEVEL)
    first, second = check(blob), check(sorted_blob)
    assert first.problems == second.problems == []
    for key in ("device_id", "hardware_compatible", "aliased_io", "target_platform"):
        assert first.details[key] == second.details[key], key
    assert second.details["device_id"] == 3
    assert second.details["aliased_io"] == [
        {"output": "aliased_io", "input": "device_id", "kind": "user"}
    ]


IO = [("a", True), ("b", True), ("o1", False), ("o2", False)]


def _bindings(meta, names):
    meta["io_bindings"] = [{"name": n, "dtype": "", "shape": [], "is_input": i} for n, i in names]


def _aliases(meta, *aliases):
    meta["aliased_io"] = [dict(zip(("output", "input", "kind"), a, strict=False)) for a in aliases]


DAMAGED = {
    "an input named twice": (
        lambda m: _bindings(m, [("a", True), ("a", True), ("o1", False)]),
        rules.TENSORRT_DUPLICATE_BINDING,
        "a",
    ),
    "one name as input and output": (
        lambda m: _bindings(m, [("a", True), ("a", False)]),
        rules.TENSORRT_DUPLICATE_BINDING,
        "a",
    ),
    "an output aliased twice": (
        lambda m: _aliases(m, ("o1", "a"), ("o1", "b")),
        rules.TENSORRT_ALIAS_REPEATED,
        "o1",
    ),
    "two aliases updating one input": (
        lambda m: _aliases(m, ("o1", "a"), ("o2", "a")),
        rules.TENSORRT_ALIAS_REPEATED,
        "a",
    ),
    "an unknown alias kind": (
        lambda m: _aliases(m, ("o1", "a", "kv_cache")),
        rules.TENSORRT_ALIAS_KIND,
        "o1",
    ),
    "an alias to no input binding": (
        lambda m: _aliases(m, ("o1", "o2")),
        rules.TENSORRT_ALIAS_BINDING,
        "o2",
    ),
    "an alias from no output binding": (
        lambda m: _aliases(m, ("zz", "a")),
        rules.TENSORRT_ALIAS_BINDING,
        "zz",
    ),
}


@pytest.mark.parametrize("case", list(DAMAGED))
def test_a_damaged_blob_is_refused_by_its_rule_naming_file_method_and_binding(upstream, case):
    edit, rule, binding = DAMAGED[case]
    blob = upstream_blob(upstream, IO, aliased={"o2": ("b", "kv_cache_update")})
    meta = metadata_of(blob)
    edit(meta)
    report = check(relaid(blob, meta))
    assert [p.rule for p in report.problems] == [rule]
    problem = report.problems[0]
    assert problem.file == "model.pte"
    assert problem.message.startswith(
        f"'model.pte' method 'forward' delegate 0 (TensorRTBackend) (binding {binding!r}): "
    )
    with pytest.raises(ValueError) as refused:
        ethost_tensorrt.parse_blob(relaid(blob, meta))
    assert refused.value.binding == binding


def test_engine_bytes_and_an_engine_key_both_are_refused(upstream):
    blob = upstream_blob(upstream, IO)
    meta = metadata_of(blob)
    meta["engine_key"] = "ab" * 32 + "_trt_engine"
    report = check(relaid(blob, meta))
    assert [p.rule for p in report.problems] == [rules.TENSORRT_ENGINE_AND_KEY]
    assert "carries engine bytes and also an engine_key" in report.problems[0].message
    # The same metadata with the engine in the .ptd is what the exporter writes.
    assert ethost_tensorrt.parse_blob(relaid(blob, meta, engine=b""))["engine_size"] == 0


@pytest.mark.parametrize("magic", [b"TR03", b"TR00"])
def test_a_future_magic_is_refused_as_an_invalid_blob(upstream, magic):
    blob = upstream_blob(upstream, IO)
    report = check(magic + blob[4:])
    assert [p.rule for p in report.problems] == [rules.TENSORRT_BLOB_INVALID]
    assert "magic is not TR01 or TR02" in report.problems[0].message


def test_a_device_id_past_int32_is_refused(upstream):
    blob = upstream_blob(upstream, IO, device_id=2**31)
    assert [p.rule for p in check(blob).problems] == [rules.TENSORRT_BLOB_INVALID]
    assert ethost_tensorrt.parse_blob(upstream_blob(upstream, IO, device_id=2**31 - 1))
