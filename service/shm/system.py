"""System shared memory regions: a client's POSIX shared memory object, mapped by the engine.

The key is a POSIX shm name ("/name", as shm_open takes it); on Linux that object is the file
/dev/shm/name, which is what is opened, never following a link and never anything but a regular
file, so a key cannot reach outside /dev/shm. The object's real size (fstat) must hold the
registered offset + byte size; only that window is mapped, so no read can leave it. A client
that unlinks its object while a request runs is harmless: the mapping keeps the pages. One that
shrinks it is caught by the size check every request makes before it touches the mapping.
"""

from __future__ import annotations

import mmap
import os
import stat

import numpy as np

from service.errors import Invalid, NotFound, Problem, clip

SHM_DIR = "/dev/shm"
NAME_MAX = 255


def _refuse(name: str, rule: str, message: str) -> Invalid:
    return Invalid(message, [Problem(None, rule, message, input=None)])


def shrank(region: str, size: int, needed: int) -> Invalid:
    """The refusal of a request whose region's object shrank to `size` bytes, below the
    `needed` its registered window takes (also the engine's lane's, from its failure's values)."""
    return _refuse(
        region,
        "shm.size",
        f"region {clip(region)!r}: its shared memory object shrank to {size} bytes, "
        f"below the registered offset + byte_size {needed}",
    )


def object_path(region: str, key) -> str:
    """The file behind a POSIX shm key, or Invalid naming the region."""
    label = f"region {clip(region)!r}"
    if not isinstance(key, str) or not key:
        raise _refuse(region, "shm.key", f"{label}: the key must be a POSIX shm name like /name")
    name = key[1:] if key.startswith("/") else key
    if (
        not name
        or "/" in name
        or "\0" in name
        or name in (".", "..")
        or len(name.encode("utf-8", "surrogateescape")) > NAME_MAX
    ):
        raise _refuse(
            region,
            "shm.key",
            f"{label}: key {clip(key)!r} is not a POSIX shm name (one '/' then 1 to "
            f"{NAME_MAX} bytes without '/' or NUL)",
        )
    return os.path.join(SHM_DIR, name)


class SystemRegion:
    """A registered window of a client's shared memory object, mapped read-write."""

    kind = "system"

    def __init__(self, name: str, key: str, offset: int, byte_size: int):
        label = f"region {clip(name)!r}"
        path = object_path(name, key)
        if byte_size <= 0:
            raise _refuse(name, "shm.size", f"{label}: byte_size must be positive")
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            raise NotFound(f"{label}: no shared memory object has key {clip(key)!r}") from None
        except OSError as exc:
            raise _refuse(
                name, "shm.key", f"{label}: cannot open key {clip(key)!r}: {exc.strerror}"
            ) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise _refuse(name, "shm.key", f"{label}: key {clip(key)!r} is not shared memory")
            if offset + byte_size > info.st_size:
                raise _refuse(
                    name,
                    "shm.size",
                    f"{label}: offset {offset} + byte_size {byte_size} is past the end of the "
                    f"shared memory object {clip(key)!r} ({info.st_size} bytes)",
                )
            start = offset - offset % mmap.ALLOCATIONGRANULARITY
            self.map = mmap.mmap(
                fd,
                offset - start + byte_size,
                mmap.MAP_SHARED,
                mmap.PROT_READ | mmap.PROT_WRITE,
                offset=start,
            )
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        self.name, self.key, self.offset, self.byte_size = name, key, offset, byte_size
        self._skip = offset - start
        self.bytes = np.frombuffer(self.map, np.uint8)[self._skip :]
        self.address = self.bytes.ctypes.data
        self.in_use = 0

    def check_intact(self) -> None:
        """Invalid when the client shrank the object under the window (reading it would
        fault); an unlinked object keeps its size and pages."""
        size = os.fstat(self.fd).st_size
        if size < self.offset + self.byte_size:
            raise shrank(self.name, size, self.offset + self.byte_size)

    def window(self, offset: int, nbytes: int) -> np.ndarray:
        """The region's bytes [offset, offset + nbytes) as uint8 (the caller checked bounds)."""
        return self.bytes[offset : offset + nbytes]

    def status(self) -> dict:
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }

    def close(self) -> None:
        self.bytes = None
        try:
            self.map.close()
        except BufferError:  # a view is still alive somewhere: the pages go with it
            pass
        os.close(self.fd)
