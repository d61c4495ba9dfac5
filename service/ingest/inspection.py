"""Reads what ingest needs from .pte (ExecuTorch program) and .ptd (FlatTensor) files.

This is a small flatbuffer reader of our own so the server can inspect uploads without torch or
executorch.exir (private, heavy, and they pull torch in). Field numbers follow the schema files
shipped with executorch 1.5.1 (schema/program.fbs, extension/flat_tensor/serialize/flat_tensor.fbs).
Every read is bounds-checked: a malformed upload raises InspectionError, never IndexError. Full
verification is the native host's job in the isolated load check.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from service.dtypes import BY_SCALAR_TYPE

PROGRAM_IDENTIFIER = b"ET12"
DATA_IDENTIFIER = b"FT01"
# The runtime's compatibility window: the identifiers above and, within them, the highest schema
# version it reads (Program::kMaxSupportedSchemaVersion and FlatTensorDataMap's, in the headers
# of the ExecuTorch the native host is built on). A newer exporter stamps a higher one; the
# runtime would refuse the file at load with a log line only, so ingest names both versions.
# tests/unit/test_schema_window.py loads files outside the window with the native host.
PROGRAM_SCHEMA_VERSION = 0
DATA_SCHEMA_VERSION = 0
_TENSOR = 5  # KernelTypes.Tensor
# KernelTypes union members -> the native host's EValue tag names (method_meta "tag").
_TAGS = {
    1: "None",
    2: "Int",
    3: "Bool",
    4: "Double",
    5: "Tensor",
    6: "String",
    7: "ListInt",
    8: "ListDouble",
    9: "ListBool",
    10: "ListTensor",
    11: "ListOptionalTensor",
}
_DEVICES = {0: "cpu", 1: "cuda"}  # DeviceType
_DELEGATE_CALL = 2  # InstructionArguments.DelegateCall
_EXTERNAL = 1  # TensorDataLocation.EXTERNAL
_SEGMENT = 1  # DataLocation.SEGMENT


class InspectionError(ValueError):
    pass


class OutsideSchemaWindow(InspectionError):
    """The file is an ExecuTorch program (or data file), of a schema this runtime does not read."""


def _runtime_release() -> str:
    try:
        return f"ExecuTorch {metadata.version('executorch')}"
    except metadata.PackageNotFoundError:
        return "this server's ExecuTorch"


def _check_identifier(data, expected: bytes, what: str) -> None:
    """Same family (two letters and two digits), other number: written by another ExecuTorch."""
    found = bytes(data[4:8]) if len(data) >= 8 else b""
    if found == expected:
        return
    if found[:2] == expected[:2] and found[2:].isdigit():
        age = "a newer" if found > expected else "an older"
        raise OutsideSchemaWindow(
            f"written by {age} ExecuTorch: its schema identifier is {found.decode()}, and this "
            f"server's runtime ({_runtime_release()}) reads {expected.decode()} only; export it "
            f"with {_runtime_release()} or serve it with a runtime that reads {found.decode()}"
        )
    raise InspectionError(
        f"not an ExecuTorch {what}: file identifier {found!r}, expected {expected!r}"
    )


def _check_version(version: int, highest: int) -> None:
    if version > highest:
        raise OutsideSchemaWindow(
            f"written by a newer ExecuTorch: its schema version is {version}, and this "
            f"server's runtime ({_runtime_release()}) reads schema versions up to {highest}; "
            f"export it with {_runtime_release()} or serve it with a newer runtime"
        )


class _Buffer:
    def __init__(self, data):
        self.data = data

    def _unpack(self, fmt: str, pos: int):
        size = struct.calcsize(fmt)
        if pos < 0 or pos + size > len(self.data):
            raise InspectionError(f"flatbuffer read of {size} bytes at {pos} is outside the file")
        return struct.unpack_from(fmt, self.data, pos)[0]

    def table(self, pos: int) -> _Table:
        vtable = pos - self._unpack("<i", pos)
        vtable_size = self._unpack("<H", vtable)
        if vtable_size < 4 or vtable_size % 2:
            raise InspectionError(f"flatbuffer vtable at {vtable} is malformed")
        return _Table(self, pos, vtable, vtable_size)

    def root(self) -> _Table:
        return self.table(self._unpack("<I", 0))


class _Table:
    def __init__(self, buf: _Buffer, pos: int, vtable: int, vtable_size: int):
        self.buf, self.pos, self.vtable, self.vtable_size = buf, pos, vtable, vtable_size

    def _field(self, slot: int) -> int | None:
        entry = 4 + 2 * slot
        if entry + 2 > self.vtable_size:
            return None
        offset = self.buf._unpack("<H", self.vtable + entry)
        return self.pos + offset if offset else None

    def scalar(self, slot: int, fmt: str, default=0):
        pos = self._field(slot)
        return default if pos is None else self.buf._unpack(fmt, pos)

    def _target(self, slot: int) -> int | None:
        pos = self._field(slot)
        return None if pos is None else pos + self.buf._unpack("<I", pos)

    def table(self, slot: int) -> _Table | None:
        target = self._target(slot)
        return None if target is None else self.buf.table(target)

    def _vector(self, slot: int) -> tuple[int, int]:
        target = self._target(slot)
        if target is None:
            return 0, 0
        return target + 4, self.buf._unpack("<I", target)

    def bytes(self, slot: int) -> bytes:
        start, length = self._vector(slot)
        if start + length > len(self.buf.data):
            raise InspectionError("flatbuffer byte vector runs past the end of the file")
        return bytes(self.buf.data[start : start + length])

    def string(self, slot: int) -> str | None:
        if self._field(slot) is None:
            return None
        try:
            return self.bytes(slot).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InspectionError(f"flatbuffer string is not UTF-8: {exc}") from None

    def scalars(self, slot: int, fmt: str) -> list:
        start, length = self._vector(slot)
        size = struct.calcsize(fmt)
        return [self.buf._unpack(fmt, start + i * size) for i in range(length)]

    def tables(self, slot: int) -> list[_Table]:
        start, length = self._vector(slot)
        out = []
        for i in range(length):
            element = start + 4 * i
            out.append(self.buf.table(element + self.buf._unpack("<I", element)))
        return out


@dataclass(frozen=True)
class TensorValue:
    """A tensor value of a method: where the planner put it and whether its data lives outside."""

    index: int
    scalar_type: int
    sizes: tuple[int, ...]
    memory_id: int | None
    memory_offset: int | None
    external_key: str | None
    dynamic: bool = False
    name: str | None = None


@dataclass
class DelegateInfo:
    method: str
    index: int
    backend_id: str
    blob: bytes
    # Where the blob starts in the program file: the isolated check child reads it from there.
    blob_offset: int
    call_args: list[int] = field(default_factory=list)

    @property
    def where(self) -> str:
        """How problems and messages name this delegate."""
        return f"method {self.method!r} delegate {self.index} ({self.backend_id})"


@dataclass
class MethodInfo:
    name: str
    inputs: list[int]
    outputs: list[int]
    tensors: dict[int, TensorValue]
    delegates: list[DelegateInfo]
    planned_buffer_sizes: list[int]
    value_tags: dict[int, str] = field(default_factory=dict)
    planned_buffer_devices: dict[int, str] = field(default_factory=dict)

    @property
    def external_keys(self) -> list[str]:
        return sorted({t.external_key for t in self.tensors.values() if t.external_key})


@dataclass
class ProgramInfo:
    methods: list[MethodInfo]


@dataclass
class DataFileInfo:
    keys: list[str]
    _segments: dict[str, tuple[int, int]]

    def span(self, key: str) -> tuple[int, int] | None:
        """(start, end) of the entry in the file: entries (TensorRT plans) can be gigabytes, so
        whoever needs one reads it from the file, in the process that needs it."""
        return self._segments.get(key)


def _open(path: Path):
    with open(path, "rb") as handle:
        if handle.seek(0, 2) == 0:
            raise InspectionError("the file is empty")
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


def _segment_span(
    buf: _Buffer, segments: list[_Table], index: int, base: int | None
) -> tuple[int, int]:
    if not 0 <= index < len(segments):
        raise InspectionError(f"segment index {index} out of range ({len(segments)} segments)")
    size = segments[index].scalar(1, "<Q")
    if base is None:
        if size:
            raise InspectionError(f"segment {index} holds data but the file has no extended header")
        return 0, 0
    start = base + segments[index].scalar(0, "<Q")
    end = start + size
    if end > len(buf.data):
        raise InspectionError(f"segment {index} ends at byte {end}, past the end of the file")
    return start, end


def _header(buf: _Buffer, magic: bytes, fields: str) -> tuple:
    """Reads the extended header that follows the flatbuffer's root offset and identifier."""
    if len(buf.data) < 12 or bytes(buf.data[8:12]) != magic:
        return ()
    size = struct.calcsize("<" + fields)
    if buf._unpack("<I", 12) < 8 + size or 16 + size > len(buf.data):
        raise InspectionError(f"extended header {magic.decode()} is truncated")
    return struct.unpack_from("<" + fields, buf.data, 16)


def _tensor_value(index: int, tensor: _Table) -> TensorValue:
    allocation = tensor.table(6)
    extra = tensor.table(9)
    name = None if extra is None else extra.string(1)
    external = name if extra is not None and extra.scalar(2, "<b") == _EXTERNAL else None
    return TensorValue(
        index=index,
        scalar_type=tensor.scalar(0, "<b"),
        sizes=tuple(tensor.scalars(2, "<i")),
        memory_id=None if allocation is None else allocation.scalar(0, "<I"),
        memory_offset=None
        if allocation is None
        else allocation.scalar(1, "<I") | (allocation.scalar(2, "<I") << 32),
        external_key=external,
        dynamic=tensor.scalar(8, "<b") != 0,
        name=name,
    )


def _method(buf, plan, program, segments, base) -> MethodInfo:
    name = plan.string(0) or ""
    tensors, tags = {}, {}
    for index, evalue in enumerate(plan.tables(2)):
        kind = evalue.scalar(0, "<B")
        tags[index] = _TAGS.get(kind, "Unknown")
        if kind == _TENSOR:
            tensors[index] = _tensor_value(index, evalue.table(1))
    inline = program.tables(3)
    delegates = []
    for index, delegate in enumerate(plan.tables(7)):
        ref = delegate.table(1)
        if ref is None:
            raise InspectionError(f"method {name!r} delegate {index} has no processed data")
        where = ref.scalar(1, "<I")
        if ref.scalar(0, "<b") == _SEGMENT:
            start, end = _segment_span(buf, segments, where, base)
        elif 0 <= where < len(inline):
            start, length = inline[where]._vector(0)
            end = start + length
            if end > len(buf.data):
                raise InspectionError("flatbuffer byte vector runs past the end of the file")
        else:
            raise InspectionError(
                f"method {name!r} delegate {index} inline data index {where} "
                f"out of range ({len(inline)} entries)"
            )
        delegates.append(
            DelegateInfo(name, index, delegate.string(0) or "", bytes(buf.data[start:end]), start)
        )
    for chain in plan.tables(5):
        for instruction in chain.tables(2):
            if instruction.scalar(0, "<B") == _DELEGATE_CALL:
                call = instruction.table(1)
                target = call.scalar(0, "<i")
                if not 0 <= target < len(delegates):
                    raise InspectionError(f"method {name!r} calls missing delegate {target}")
                delegates[target].call_args = call.scalars(1, "<i")
    devices = {
        entry.scalar(0, "<i"): _DEVICES.get(entry.scalar(1, "<b"), "unknown")
        for entry in plan.tables(9)
    }
    return MethodInfo(
        name=name,
        inputs=plan.scalars(3, "<i"),
        outputs=plan.scalars(4, "<i"),
        tensors=tensors,
        delegates=delegates,
        planned_buffer_sizes=plan.scalars(8, "<q"),
        value_tags=tags,
        planned_buffer_devices=devices,
    )


def _value_spec(method: MethodInfo, role: str, position: int, value: int) -> dict:
    spec = {
        "index": position,
        "tag": method.value_tags.get(value, "Unknown"),
        "name": f"{role} {position}",
    }
    tensor = method.tensors.get(value)
    if tensor is None:
        return spec
    known = BY_SCALAR_TYPE.get(tensor.scalar_type)
    dtype, itemsize = (
        (known.name, known.itemsize) if known else (f"scalar type {tensor.scalar_type}", 0)
    )
    if tensor.name:
        spec["name"] += f" ({tensor.name!r})"
    return {
        **spec,
        "dtype": dtype,
        "shape": list(tensor.sizes),
        "dynamic": tensor.dynamic,
        "memory_planned": tensor.memory_id is not None,
        "nbytes": itemsize * math.prod(tensor.sizes),
    }


def method_meta(method: MethodInfo) -> dict:
    """The native host's method_meta, read from the file without loading the method.

    The host can only describe a method by loading it, which initializes its delegates; a model
    whose delegates cannot run on this host (unverified TensorRT plans) is described from here.
    Slot 0 of the planned buffer sizes is reserved by ExecuTorch and is not a buffer.
    """
    return {
        "name": method.name,
        "inputs": [_value_spec(method, "input", i, v) for i, v in enumerate(method.inputs)],
        "outputs": [_value_spec(method, "output", i, v) for i, v in enumerate(method.outputs)],
        "delegates": [d.backend_id for d in method.delegates],
        "planned_buffers": [
            {"size": size, "device": method.planned_buffer_devices.get(index, "cpu")}
            for index, size in enumerate(method.planned_buffer_sizes[1:], start=1)
        ],
    }


def inspect_program(path: Path) -> ProgramInfo:
    data = _open(path)
    buf = _Buffer(data)
    _check_identifier(data, PROGRAM_IDENTIFIER, "program")
    header = _header(buf, b"eh00", "QQ")
    base = header[1] if header else None
    program = buf.root()
    _check_version(program.scalar(0, "<I"), PROGRAM_SCHEMA_VERSION)
    segments = program.tables(4)
    methods = [_method(buf, plan, program, segments, base) for plan in program.tables(1)]
    if not methods:
        raise InspectionError("program has no methods")
    return ProgramInfo(methods=methods)


def inspect_data_file(path: Path) -> DataFileInfo:
    data = _open(path)
    buf = _Buffer(data)
    _check_identifier(data, DATA_IDENTIFIER, "data file")
    header = _header(buf, b"FH01", "QQQQ")
    if not header:
        raise InspectionError("data file has no FH01 header")
    base = header[2]
    root = buf.root()
    _check_version(root.scalar(0, "<I"), DATA_SCHEMA_VERSION)
    segments = root.tables(1)
    spans = {}
    for named in root.tables(2):
        key = named.string(0)
        if key is None:
            raise InspectionError("data file has a named-data entry without a key")
        spans[key] = _segment_span(buf, segments, named.scalar(1, "<I"), base)
    return DataFileInfo(keys=list(spans), _segments=spans)
