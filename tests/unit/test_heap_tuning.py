"""service/shared/heap_tuning.py: image-sized buffers freed and allocated again, as a front does
per request, come back from the heap's pages instead of faulting new ones in, and freed memory
still goes back to the kernel when trimmed (each run in a process of its own: the thresholds are
process-wide)."""

import subprocess
import sys

import pytest

# One request: `held` image-sized buffers (FP32 1x3x224x224) alive at once, then freed.
_LOOP = """
import resource, sys
from service.shared.heap_tuning import keep_freed_pages
if sys.argv[1] == "tuned":
    assert keep_freed_pages()
held = int(sys.argv[2])
def request():
    buffers = [bytes(bytearray(600_000)) for _ in range(held)]
    del buffers
request(); request()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    request()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""

# 48 MiB in 1 MiB buffers (under the mmap threshold: heap pages), freed, by the main thread or by
# another (as grpcio's threads receive messages); resident KiB after the free and after a trim.
_TRIM = """
import asyncio, sys, threading
from service.shared.heap_tuning import keep_freed_pages, release_freed_memory
def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
assert keep_freed_pages()
before = rss_kib()
def churn():
    buffers = [bytes(bytearray(1 << 20)) for _ in range(48)]
    del buffers
if sys.argv[1] == "thread":
    worker = threading.Thread(target=churn)
    worker.start(); worker.join()
else:
    churn()
freed = rss_kib()
asyncio.run(release_freed_memory())
print(freed - before, rss_kib() - before)
"""


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _faults_per_request(mode: str, held: int) -> float:
    return float(_run(_LOOP, mode, str(held)))


def test_large_buffers_reuse_the_heaps_pages_once_tuned():
    pages = 3 * 600_000 // 4096
    assert _faults_per_request("plain", 3) > pages / 2  # glibc's own thresholds: faulted anew
    assert _faults_per_request("tuned", 3) < pages / 50


def test_many_calls_in_flight_reuse_the_heaps_pages_too():
    # Sixteen gRPC image calls in flight each hold their message: 9.6 MB freed at once, which a
    # trim threshold of a few MiB handed back to the kernel between every two rounds.
    pages = 16 * 600_000 // 4096
    assert _faults_per_request("tuned", 16) < pages / 50


@pytest.mark.parametrize("freed_by", ["main", "thread"])
def test_freed_memory_goes_back_to_the_kernel_when_trimmed(freed_by):
    kept, trimmed = (int(v) for v in _run(_TRIM, freed_by).split())
    assert kept > 40 * 1024  # no automatic trim: the timer's (service/front/draining.py)
    assert trimmed < 8 * 1024
