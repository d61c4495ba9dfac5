"""A stored model's files checked against the sha-256 recorded at ingest, before they load.

Neither the .pte nor the .ptd format carries a digest, and a damaged TensorRT engine mostly does
not fail: upstream changed one value at a time inside an engine and 12 of 24 such engines
loaded, 8 of them answering wrongly. So bit rot or an edit on disk must be caught before the
native host maps the files, on every load (start, engine restart, repository load, upload).
It runs in the thread that opens the model, never on the request path, and reads in large
chunks into one buffer: hashlib releases the GIL while it hashes them, so the event loop and
the other models' requests go on meanwhile (bench/bench_digest.py measures the cost).
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from service.store.records import StoredModel

# One reused read buffer: small enough that the engine's resident memory does not keep it (an
# 8 MiB one showed in the process's RSS after a load), large enough that a read costs nothing.
CHUNK_BYTES = 1 << 20

log = logging.getLogger(__name__)


class DigestMismatch(Exception):
    """A stored file is no longer the file that was uploaded; the message says which and how."""


@dataclass(frozen=True)
class DigestCheck:
    """What a check read and how long it took (for the log and the metrics)."""

    files: int
    bytes: int
    seconds: float


def file_sha256(path: Path, chunk_bytes: int = CHUNK_BYTES) -> tuple[str, int]:
    """(hex digest, bytes read) of the file."""
    digest = hashlib.sha256()
    buffer = bytearray(chunk_bytes)
    view = memoryview(buffer)
    total = 0
    with open(path, "rb", buffering=0) as source:
        while count := source.readinto(buffer):
            digest.update(view[:count])
            total += count
    return digest.hexdigest(), total


def verify(model: StoredModel) -> DigestCheck:
    """Raises DigestMismatch naming the first file whose bytes are not the recorded digest."""
    begun = time.perf_counter()
    total = 0
    for stored in model.description.files:
        path = model.path_of(stored)
        try:
            found, size = file_sha256(path)
        except OSError as exc:
            raise DigestMismatch(
                f"stored file {stored.name!r} cannot be read to verify it: {exc}"
            ) from None
        total += size
        if found != stored.sha256:
            raise DigestMismatch(
                f"stored file {stored.name!r} is not the file that was uploaded: its sha-256 is "
                f"now {found}, ingest recorded {stored.sha256} ({size} bytes now, "
                f"{stored.size} then); it changed on disk (bit rot or an edit), so the model is "
                "not loaded: upload it again"
            )
    check = DigestCheck(len(model.description.files), total, time.perf_counter() - begun)
    log.info(
        "model %s version %d: %d file(s), %d bytes match their digests (%.3f s)",
        model.name,
        model.version,
        check.files,
        check.bytes,
        check.seconds,
    )
    return check
