"""Benchmark of the ethost program host.

1. Per-call overhead on a trivial program (Linear 4->3 + ReLU), ethost vs executorch.runtime in
   the same process, same program, same input. Target: ethost <= 1/3 of executorch.runtime.
2. Thread scaling on a CPU-heavy program: throughput with 2 threads (2 instances) over 1 thread.
   Target: >= 1.7x on 2 cores.

usage: python bench/bench_host.py [--programs-dir DIR]   (ethost must be importable)
"""

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import ethost  # noqa: E402

from scratch import scratch_dir  # noqa: E402
from support import programs  # noqa: E402


def per_call_seconds(call, seconds=1.0, repeats=5):
    """Best-of-`repeats` mean time of `call`, each repeat timing a batch of about
    `seconds`/repeats."""
    for _ in range(200):
        call()
    n = 200
    start = time.perf_counter()
    while time.perf_counter() - start < 0.05:
        for _ in range(n):
            call()
    batch = max(200, int(n * (seconds / repeats) / max(time.perf_counter() - start, 1e-6)))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(batch):
            call()
        best = min(best, (time.perf_counter() - start) / batch)
    return best


def overhead(pte: Path):
    import torch
    from executorch.runtime import Runtime

    x = np.ones((2, 4), np.float32)
    method = ethost.Program(pte).load_method("forward")
    ours = per_call_seconds(lambda: method.execute([x]))

    et_method = Runtime.get().load_program(str(pte)).load_method("forward")
    xt = torch.from_numpy(x)
    theirs = per_call_seconds(lambda: et_method.execute([xt]))
    np.testing.assert_allclose(
        method.execute([x])[0], et_method.execute([xt])[0].numpy(), rtol=1e-6
    )
    return ours, theirs


def scaling(pte: Path, x: np.ndarray, kernel_threadpool: bool, calls_per_thread=40):
    program = ethost.Program(pte)
    instances = program.instances("forward", 2)
    for m in instances:
        m.kernel_threadpool = kernel_threadpool
        m.execute([x])

    def work(method):
        for _ in range(calls_per_thread):
            method.execute([x])

    def throughput(n_threads):
        threads = [threading.Thread(target=work, args=(instances[i],)) for i in range(n_threads)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return n_threads * calls_per_thread / (time.perf_counter() - start)

    one = throughput(1)
    two = throughput(2)
    return one, two


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs-dir", type=Path, default=None)
    args = parser.parse_args()
    out_dir = args.programs_dir or scratch_dir("bench-host-")

    trivial = programs.export_linear_relu(out_dir)
    heavy = programs.export_cpu_heavy(out_dir, size=16384)

    ours, theirs = overhead(trivial.pte)
    print(
        f"per-call, trivial program: ethost {ours * 1e6:.2f} us, executorch.runtime "
        f"{theirs * 1e6:.2f} us, ratio {ours / theirs:.2f} (target <= 0.33)"
    )

    # ExecuTorch's kernels share one process-wide thread pool; instances in parallel threads
    # scale only when their kernels run inline (kernel_threadpool=False, what the server sets).
    x = heavy.example_inputs[0].numpy()
    for pool in (True, False):
        one, two = scaling(heavy.pte, x, kernel_threadpool=pool)
        print(
            f"thread scaling, CPU-heavy program, kernel_threadpool={pool}: 1 thread {one:.2f} "
            f"calls/s, 2 threads {two:.2f} calls/s, ratio {two / one:.2f}x (target >= 1.7x)"
        )


if __name__ == "__main__":
    main()
