"""How much of a model this process holds in RAM, measured rather than derived from file sizes.

The native host maps a model's .pte and .ptd files (ExecuTorch's MmapDataLoader, no mlock), so a
weight costs RAM only once a kernel reads it, and costs it once: the page cache pages are the
process's file-backed residency (RssFile). What a program itself copies lands in its method
instances' planned arenas (anonymous memory, RssAnon): ExecuTorch lowers `nn.Linear` to
`permute_copy(weight)` + `addmm`, so unless the exporter folded the transposition into the
constant (constant propagation), every execute writes a transposed copy of each such weight into
an arena, and the weights are resident twice. Reporting the two apart makes that visible per
model in its description and in /metrics.

Linux only (/proc/self/smaps, mincore); elsewhere the figures are None.
"""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_PAGE = mmap.PAGESIZE


@dataclass(frozen=True)
class ModelMemory:
    """Bytes of one model resident in this process."""

    files_bytes: int | None  # resident pages of the mapped .pte/.ptd files
    arena_bytes: int  # host memory planned for the method instances' arenas
    arena_resident_bytes: int | None  # the part of it backed by RAM (touched by an execute)

    @property
    def resident_bytes(self) -> int | None:
        if self.files_bytes is None or self.arena_resident_bytes is None:
            return None
        return self.files_bytes + self.arena_resident_bytes

    def to_json(self) -> dict:
        return {
            "resident_bytes": self.resident_bytes,
            "mapped_files_resident_bytes": self.files_bytes,
            "planned_arena_bytes": self.arena_bytes,
            "planned_arena_resident_bytes": self.arena_resident_bytes,
        }


def mapped_files() -> dict[str, int] | None:
    """Resident bytes of this process's file mappings, by file (the Rss lines of smaps); read
    once per report and shared by every model in it."""
    try:
        with open("/proc/self/smaps", encoding="utf-8", errors="replace") as smaps:
            totals: dict[str, int] = {}
            path = None
            for line in smaps:
                fields = line.split(None, 5)
                if not fields:
                    continue
                if "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's header
                    path = fields[5].rstrip("\n") if len(fields) == 6 else None
                elif path is not None and fields[0] == "Rss:":
                    totals[path] = totals.get(path, 0) + int(fields[1]) * 1024
            return totals
    except OSError:
        return None


def _libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def range_resident_bytes(address: int, size: int) -> int | None:
    """Bytes of [address, address + size) that lie in resident pages (mincore)."""
    if size <= 0:
        return 0
    if _LIBC is None:
        return None
    start = address - address % _PAGE
    pages = (address + size - start + _PAGE - 1) // _PAGE
    vector = ctypes.create_string_buffer(pages)
    if _LIBC.mincore(start, pages * _PAGE, vector) != 0:
        return None
    flags = vector.raw
    resident = sum(b & 1 for b in flags) * _PAGE
    # The first and last pages may hold other allocations too: count only the range's part.
    if flags[0] & 1:
        resident -= address - start
    if flags[-1] & 1:
        resident -= start + pages * _PAGE - (address + size)
    return resident


def measure(
    paths: Iterable[Path], arenas: Iterable[tuple[int, int]], files: dict[str, int] | None
) -> ModelMemory:
    """`arenas`: (address, size) of every host arena of the model's method instances; `files`:
    what mapped_files() returned."""
    planned, resident = 0, 0
    for address, size in arenas:
        planned += size
        got = range_resident_bytes(address, size)
        resident = None if got is None or resident is None else resident + got
    if files is None:
        return ModelMemory(None, planned, resident)
    mapped = sum(files.get(str(Path(p).resolve()), 0) for p in paths)
    return ModelMemory(mapped, planned, resident)
