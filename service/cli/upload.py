"""The `POST /models` body, streamed from disk with a progress display and per-file digests.

A deploy can be gigabytes of engines, so the body is never held in memory: it is written part
by part from the files, with its length computed beforehand (the server refuses an oversized
upload from the Content-Length, before any byte is sent). Each file part carries an RFC 9530
`Content-Digest` (sha-256) computed before sending, so the server proves it stored exactly the
bytes that were on this disk (docs/deploying.md, "Verified uploads").
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click

from service.cli import output

CHUNK = 1 << 20


@dataclass(frozen=True)
class FilePart:
    role: str  # "program" or "data"
    path: Path
    size: int
    sha256: bytes

    @classmethod
    def of(cls, role: str, path: Path) -> FilePart:
        digest = hashlib.sha256()
        with open(path, "rb") as source:
            while chunk := source.read(CHUNK):
                digest.update(chunk)
        return cls(role, path, path.stat().st_size, digest.digest())

    def header(self, boundary: str) -> bytes:
        filename = self.path.name.replace('"', "%22").replace("\r", "").replace("\n", "")
        digest = base64.b64encode(self.sha256).decode()
        return (
            f"--{boundary}\r\n"
            f'Content-Disposition: form-data; name="{self.role}"; filename="{filename}"\r\n'
            "Content-Type: application/octet-stream\r\n"
            f"Content-Digest: sha-256=:{digest}:\r\n\r\n"
        ).encode()


def _field(boundary: str, name: str, value: str) -> bytes:
    return (
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
    ).encode()


class Progress:
    """Bytes sent: a rich bar (bytes, rate, ETA) on a terminal, a plain line per 10% otherwise."""

    def __init__(self, total: int, to_stderr: bool = False):
        self.total = total
        self._to_stderr = to_stderr
        self.sent = 0
        self._started = time.monotonic()
        self._next_percent = 10
        self._bar = None
        if output.is_tty() and not to_stderr:
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )
            from rich.progress import Progress as Bar

            self._bar = Bar(
                TextColumn("uploading"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
            )
            self._task = self._bar.add_task("upload", total=total)
            self._bar.start()

    def advance(self, count: int) -> None:
        self.sent += count
        if self._bar is not None:
            self._bar.update(self._task, completed=self.sent)
            return
        percent = 100 * self.sent // max(self.total, 1)
        if percent >= self._next_percent or self.sent == self.total:
            elapsed = max(time.monotonic() - self._started, 1e-6)
            click.echo(
                f"uploading: {self.sent} of {self.total} bytes ({percent}%), "
                f"{self.sent / elapsed / 2**20:.1f} MiB/s",
                err=self._to_stderr,
            )
            self._next_percent = percent // 10 * 10 + 10

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


class UploadBody:
    """An iterable body of known length; iterating it sends the files and moves the progress."""

    def __init__(self, name: str, files: list[FilePart], fields: dict[str, str]):
        self.boundary = "etrt-" + secrets.token_hex(16)
        self.files = files
        self._head = _field(self.boundary, "name", name) + b"".join(
            _field(self.boundary, key, value) for key, value in fields.items()
        )
        self._tail = f"--{self.boundary}--\r\n".encode()
        self.length = (
            len(self._head)
            + sum(len(f.header(self.boundary)) + f.size + 2 for f in files)
            + len(self._tail)
        )
        self.progress: Progress | None = None

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"

    def __iter__(self) -> Iterator[bytes]:
        progress = self.progress or Progress(self.length)
        self.progress = progress
        progress.advance(len(self._head))
        yield self._head
        for part in self.files:
            header = part.header(self.boundary)
            progress.advance(len(header))
            yield header
            with open(part.path, "rb") as source:
                while chunk := source.read(CHUNK):
                    progress.advance(len(chunk))
                    yield chunk
            progress.advance(2)
            yield b"\r\n"
        progress.advance(len(self._tail))
        yield self._tail
