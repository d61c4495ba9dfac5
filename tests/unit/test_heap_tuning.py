"""service/front/heap_tuning.py: image-sized buffers freed and allocated again, as a front does
per request, come back from the heap's pages instead of faulting new ones in (each run in a
process of its own: the thresholds are process-wide)."""

import subprocess
import sys

_LOOP = """
import resource, sys
from service.front.heap_tuning import keep_freed_pages
if sys.argv[1] == "tuned":
    assert keep_freed_pages()
def request():  # three image-sized buffers (FP32 1x3x224x224) alive at once, then freed
    buffers = [bytes(bytearray(600_000)) for _ in range(3)]
    del buffers
request(); request()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    request()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""


def _faults_per_request(mode: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", _LOOP, mode], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return float(done.stdout)


def test_large_buffers_reuse_the_heaps_pages_once_tuned():
    pages = 3 * 600_000 // 4096
    assert _faults_per_request("plain") > pages / 2  # glibc's own thresholds: faulted anew
    assert _faults_per_request("tuned") < pages / 50
