"""Shared memory that request tensors live in, from the protocol front to the engine and back.

Each front owns one arena: a memfd (no /dev/shm mount needed, whose size containers limit to
64 MB by default) that it hands to the engine over the control socket, and that both map. A
request's tensors are received or decoded into a slot of it, the engine binds them at those
addresses and writes the outputs into the same slot, and the front answers from there: the bytes
never travel through a pipe.

Slots are 256-byte aligned, the boundary TensorRT needs for every buffer it is given, so no
request input or output needs the delegate's staging copy for alignment. Allocation is first fit
over a sorted list of free extents, coalesced on free; a slot that cannot be had now is a 503
for the client (Busy), one larger than the whole arena a 413. Freed extents of at least
`RETURN_BYTES` give their pages back to the kernel (MADV_REMOVE), so resident memory follows the
bytes in flight rather than the largest request ever seen -- except where the engine pinned the
arena for CUDA, whose pages stay put.
"""

from __future__ import annotations

import bisect
import mmap
import os

import numpy as np

ALIGNMENT = 256
# Free extents at least this large are returned to the kernel when freed.
RETURN_BYTES = 4 * 1024 * 1024


def align_up(value: int, alignment: int = ALIGNMENT) -> int:
    return -(-value // alignment) * alignment


class ArenaFull(Exception):
    """No free extent is large enough right now."""


class Region:
    """A mapping of an arena's memfd; the engine maps the fronts' arenas through this too."""

    def __init__(self, fd: int, size: int):
        self.fd = fd
        self.size = size
        self.map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.bytes = np.frombuffer(self.map, np.uint8)
        self.address = self.bytes.ctypes.data
        self.pinned = False  # registered with CUDA by the engine (service/engine/pinning.py)

    def array(self, offset: int, dtype: np.dtype, shape: tuple) -> np.ndarray:
        """A numpy view of `shape` x `dtype` at `offset` (no copy); TypeError past the end."""
        return np.ndarray(shape, dtype, self.map, offset)

    def view(self, offset: int, nbytes: int) -> memoryview:
        return memoryview(self.map)[offset : offset + nbytes]

    def offset_of(self, array: np.ndarray) -> int | None:
        """Where a C-contiguous array lies in this region, or None when it lies elsewhere."""
        start = array.ctypes.data
        if self.address <= start and start + array.nbytes <= self.address + self.size:
            return start - self.address
        return None

    def give_back(self, offset: int, nbytes: int) -> None:
        try:
            self.map.madvise(mmap.MADV_REMOVE, offset, nbytes)
        except (OSError, AttributeError, ValueError):  # not supported here: pages stay resident
            pass


class Lease:
    """A slot held for a request; freed when its last holder releases it (the protocol that
    received the body and the engine client that waits on the engine both may hold one)."""

    __slots__ = ("arena", "offset", "size", "_holders")

    def __init__(self, arena: Arena, offset: int, size: int):
        self.arena = arena
        self.offset = offset
        self.size = size
        self._holders = 1

    def retain(self) -> Lease:
        self._holders += 1
        return self

    def release(self) -> None:
        self._holders -= 1
        if self._holders == 0:
            self.arena._free(self.offset, self.size)

    def view(self, start: int = 0, nbytes: int | None = None) -> memoryview:
        nbytes = self.size - start if nbytes is None else nbytes
        return self.arena.region.view(self.offset + start, nbytes)


class Arena:
    """A front's arena and its allocator (one event loop uses it: no lock)."""

    def __init__(self, size: int):
        size = align_up(size, mmap.PAGESIZE)
        fd = os.memfd_create("etrt-arena", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        self.region = Region(fd, size)
        self.size = size
        # Free extents as parallel sorted lists of starts and their lengths.
        self._starts = [0]
        self._lengths = [size]
        self.in_use = 0
        # The engine pins the arena for CUDA: pinned pages must not be given back.
        self.pinned = False

    @property
    def fd(self) -> int:
        return self.region.fd

    def allocate(self, nbytes: int) -> Lease:
        """A 256-byte aligned slot of at least `nbytes` (one alignment unit for zero)."""
        size = align_up(max(nbytes, 1))
        for index, length in enumerate(self._lengths):
            if length >= size:
                start = self._starts[index]
                if length == size:
                    del self._starts[index], self._lengths[index]
                else:
                    self._starts[index] = start + size
                    self._lengths[index] = length - size
                self.in_use += size
                return Lease(self, start, size)
        raise ArenaFull(size)

    def _free(self, start: int, size: int) -> None:
        self.in_use -= size
        index = bisect.bisect_left(self._starts, start)
        if size >= RETURN_BYTES and not self.pinned:
            self.region.give_back(start, size)
        # Coalesce with the extent before and the one after.
        if index > 0 and self._starts[index - 1] + self._lengths[index - 1] == start:
            index -= 1
            start = self._starts[index]
            size += self._lengths[index]
            del self._starts[index], self._lengths[index]
        if index < len(self._starts) and start + size == self._starts[index]:
            size += self._lengths[index]
            del self._starts[index], self._lengths[index]
        self._starts.insert(index, start)
        self._lengths.insert(index, size)

    def free_extents(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._lengths))
