"""The /metrics page as the engine last rendered it, in the control memfd after the control page,
so that a front under load answers a scrape in one turn of its event loop.

Asking the engine costs a busy front two more turns (one to send the call, one to read the
answer), each waiting behind every request its loop has ready; on two cores flooded with
inference that put `/metrics`' p99 at 80-200 ms while the engine rendered the page in 0.4 ms
(docs/benchmarks.md). The engine writes; fronts only read. A write is bracketed by a sequence
number (odd while writing) and carries the page's CRC-32, so a reader that raced a write, or saw
the bytes out of order on a weakly ordered CPU (a Jetson's), gets None and asks the engine.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from typing import NamedTuple

# seq (odd while a write is under way), length, rendered_at (CLOCK_MONOTONIC, which every
# process of the host shares), CRC-32 of the page's bytes.
HEADER = struct.Struct("<QQdI")
AT = mmap.PAGESIZE  # after the control page
BODY_AT = AT + 64
# Room for the page: the memfd is sparse, so only what a page fills costs memory. A page larger
# than this is not published, and every scrape asks the engine.
CAPACITY = 16 << 20


class Snapshot(NamedTuple):
    text: str
    rendered_at: float


class Writer:
    """The engine's side: one per control page."""

    def __init__(self, page: mmap.mmap):
        self._page = page
        self._seq = 0

    def write(self, text: str, rendered_at: float) -> bool:
        """False (and nothing readable) when the page does not fit."""
        data = text.encode()
        fits = len(data) <= CAPACITY
        self._seq += 1
        HEADER.pack_into(self._page, AT, self._seq, 0, 0.0, 0)
        if fits:
            self._page[BODY_AT : BODY_AT + len(data)] = data
        self._seq += 1
        crc = zlib.crc32(data) if fits else 0
        HEADER.pack_into(self._page, AT, self._seq, len(data) if fits else 0, rendered_at, crc)
        return fits


def read(page: mmap.mmap) -> Snapshot | None:
    """The last page written whole, or None (none yet, being written, torn, or too large)."""
    seq, length, rendered_at, crc = HEADER.unpack_from(page, AT)
    if seq & 1 or length == 0:
        return None
    data = page[BODY_AT : BODY_AT + length]
    if HEADER.unpack_from(page, AT)[0] != seq or zlib.crc32(data) != crc:
        return None
    return Snapshot(data.decode(), rendered_at)
