"""A front's C heap kept for image-sized buffers, and handed back to the kernel by a timer.

glibc's malloc serves a buffer above its mmap threshold (128 KiB at first, raised to the largest
one freed since) with pages of its own, and gives the top of a heap back to the kernel whenever
more than its trim threshold lies free there. A front allocates a few image-sized buffers per
request (a gRPC request's and answer's bytes, an HTTP body's pieces, the Python path's answer),
and every call in flight holds its own: with eight FP32 1x3x224x224 gRPC calls in flight, each
holding its 602 KB message while the engine runs it, the top of the event-loop thread's heap rose
and fell by several MiB between calls, went back to the kernel each time (a 4 MiB threshold), and
the next calls faulted it in again page by page, zeroed: 55-93 page faults a call on that thread
on two 16-core GPU hosts, where grpcio's own floor takes 0.1. As below, alternated with the
4 MiB threshold on one host (8 fronts, 64 h2load connections; docs/benchmarks.md): 0.6 faults,
the thread's CPU per call 586-601 -> 489-513 us, 7,679-7,716 -> 7,983-8,447 calls/s.

So `keep_freed_pages` serves buffers up to MMAP_BYTES from the heap, turns glibc's automatic trim
off, and keeps one arena for all of the front's threads: malloc_trim gives back the free pages of
every arena but the top of the main one only, and grpcio's threads, which receive a message in
many slices, would otherwise keep theirs. Freed memory goes back through `release_freed_memory`
(malloc_trim, in a worker thread), which the front's server calls every TRIM_PERIOD_S
(service/front/draining.py) and the gRPC binding after any call of 8 MiB or more: eight refused
64 MiB gRPC messages leave nothing behind (tests/e2e/test_request_memory_e2e.py), and a front's
resident memory comes back to what is in flight within TRIM_PERIOD_S. Steady image traffic
refaults what a trim gave back once a period, not once a call (on 2 cores, one front: 0.4 faults
a call untrimmed, 8.8 trimmed every second).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # glibc's mallopt (malloc.h)
MMAP_BYTES = 2 << 20
# glibc trims the top of a heap when more than this lies free: never, in effect (mallopt takes
# an int), the timer trims instead.
NO_AUTOMATIC_TRIM = 2**31 - 1
# Seconds between two trims of a front's heap: how long memory freed after a burst stays
# resident, against a refault of the heap's free pages once a period under steady traffic.
TRIM_PERIOD_S = 5.0


def _libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c"))
    except (OSError, TypeError):
        return None


_LIBC = _libc()


def keep_freed_pages() -> bool:
    """Fixes the thresholds in this process (glibc only; elsewhere nothing changes). Whether
    they were set."""
    mallopt = getattr(_LIBC, "mallopt", None)
    if mallopt is None:  # not glibc (musl has no mallopt)
        return False
    done = (
        mallopt(_M_ARENA_MAX, 1) == 1
        and mallopt(_M_MMAP_THRESHOLD, MMAP_BYTES) == 1
        and mallopt(_M_TRIM_THRESHOLD, NO_AUTOMATIC_TRIM) == 1
    )
    if not done:
        log.warning("the C heap's thresholds could not be set; large buffers fault in anew")
    return done


_trim = getattr(_LIBC, "malloc_trim", None)  # None where the C library has none (musl)
_trim_running = _trim_wanted = False


async def release_freed_memory() -> None:
    """Returns the heap's free pages to the kernel, whichever thread freed them. One trim runs at
    a time; a caller that comes meanwhile gets one more pass after it."""
    global _trim_running, _trim_wanted
    _trim_wanted = True
    if _trim is None or _trim_running:
        return
    _trim_running = True
    try:
        while _trim_wanted:
            _trim_wanted = False
            await asyncio.to_thread(_trim, 0)
    finally:
        _trim_running = False
