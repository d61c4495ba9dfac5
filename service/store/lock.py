"""One server per artifacts folder: an exclusive lock taken before anything else at start.

Two servers on one folder would reconcile one SQLite registry against each other (each removes
the other's uploads in progress as leftovers) and each would serve the models it loaded at its
own start, stale once the other changes them. So a second server exits at once, naming the
folder and the holder.

The lock is `flock` on `server.lock` in the folder: the kernel releases it when the holding
process dies, however it dies, so a crash never leaves a stale lock to clean up by hand (a pid
file would). The holder writes its pid, host and start time into the file for the message the
next server prints; the lock, not the text, decides. The descriptor is close-on-exec, so the
load-check children the server spawns do not hold the lock after it exits. `flock` only excludes
processes that share a kernel's view of the file: on a network file system it may not, so give
each replica its own folder (docs/kserve.md, "Scaling out").
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import time
from pathlib import Path

LOCK_FILE = "server.lock"


class StoreLockError(Exception):
    pass


class StoreLock:
    def __init__(self, path: Path, fd: int):
        self.path = path
        self._fd = fd

    def fileno(self) -> int:
        """The locked descriptor; the engine process inherits it (service/supervisor.py), and
        the lock is held for as long as any holder of it lives."""
        return self._fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor releases the flock
            self._fd = None


def acquire(root: Path) -> StoreLock:
    """Locks `root` for this process, or raises StoreLockError saying who holds it."""
    root = Path(root).resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
        path = root / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise StoreLockError(
            f"cannot open the lock file in artifacts folder {root}: {exc}"
        ) from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _read(fd)
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise StoreLockError(
                f"artifacts folder {root} is in use by another server "
                f"({holder or 'holder not recorded yet'}; lock file {path}); stop that server or "
                f"give this one another folder (--artifacts)"
            ) from None
        raise StoreLockError(f"cannot lock artifacts folder {root} ({path}): {exc}") from exc
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record = f"pid {os.getpid()} on host {socket.gethostname()}, started {started}\n".encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, record, 0)
    return StoreLock(path, fd)


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 4096, 0).decode(errors="replace").strip()
    except OSError:
        return ""
