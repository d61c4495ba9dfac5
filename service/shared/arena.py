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

import mmap
import os

import etrt_front
import numpy as np

from service.shared.limits import ALIGNMENT

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
    """A front's arena and its allocator (one event loop uses it: no lock). The allocator is
    native (runtime_ext/front/slots.h), shared with the fronts' native path, which takes slots
    for the requests it reads (service/front/native_path.py)."""

    def __init__(self, size: int):
        size = align_up(size, mmap.PAGESIZE)
        fd = os.memfd_create("etrt-arena", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        self.region = Region(fd, size)
        self.size = size
        self.slots = etrt_front.Slots(size, self.region.address, RETURN_BYTES)
        self._pinned = False

    @property
    def fd(self) -> int:
        return self.region.fd

    @property
    def in_use(self) -> int:
        return self.slots.in_use

    @property
    def pinned(self) -> bool:
        """The engine pinned the arena for CUDA: pinned pages are not given back."""
        return self._pinned

    @pinned.setter
    def pinned(self, value: bool) -> None:
        self._pinned = value
        self.slots.set_pinned(value)

    def allocate(self, nbytes: int) -> Lease:
        """A 256-byte aligned slot of at least `nbytes` (one alignment unit for zero)."""
        slot = self.slots.allocate(nbytes)
        if slot is None:
            raise ArenaFull(align_up(max(nbytes, 1)))
        return Lease(self, *slot)

    def _free(self, start: int, size: int) -> None:
        self.slots.free(start, size)

    def free_extents(self) -> list[tuple[int, int]]:
        return self.slots.free_extents()
