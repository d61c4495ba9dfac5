"""A front's C heap kept for image-sized buffers.

glibc's malloc serves a buffer above its mmap threshold (128 KiB at first, raised to the largest
one freed since) with pages of its own, and gives the top of its heap back to the kernel whenever
more than twice that threshold lies free there. A front allocates a few image-sized buffers per
request (a gRPC request's and answer's bytes, an HTTP body's pieces, the Python path's answer),
and frees them before the next request: each next one was then served from pages just handed
back, faulted in again and zeroed page by page. Measured on 2 cores with FP32 1x3x224x224 gRPC
requests (602 KB each way), a front's CPU per request went from ~1.7-1.9 ms to ~1.5 ms with the
thresholds fixed below. Buffers larger than MMAP_BYTES still get pages of their own, and a heap
keeps at most TRIM_BYTES free at its top: with 32 MiB, 53 MiB of eight refused 64 MiB gRPC
messages stayed resident (grpcio's threads each have a heap; tests/e2e/test_request_memory_e2e.py
allows 10 %), with 4 MiB none did.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
MMAP_BYTES = 2 << 20
TRIM_BYTES = 4 << 20


def keep_freed_pages() -> bool:
    """Fixes the thresholds in this process (glibc only; elsewhere nothing changes). Whether
    they were set."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):  # not glibc (musl has no mallopt)
        return False
    done = (
        mallopt(_M_MMAP_THRESHOLD, MMAP_BYTES) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_BYTES) == 1
    )
    if not done:
        log.warning("the C heap's thresholds could not be set; large buffers fault in anew")
    return done
