"""Host time of one delegate execute of a 10-kernel stand-in engine: CUDA-graph replay against
plain enqueue, in the same run (`python bench/bench_cuda_graphs.py`; GPU hosts only, needs
cupy and a build with ETHOST_TESTING=ON).

The engine is the test engine provider's `kernels` op: `--kernels` CUDA kernels enqueued with
cupy on the delegate's stream, nothing synchronous, so the delegate can capture it. Both rows
time testing.Runner.run (the delegate's whole execute: argument checks, binding, enqueue or
graph launch, and the stream synchronize every execute ends with):

  plain enqueue   use_cuda_graphs off: every execute enters the provider (the GIL, then one
                  Python call that launches the kernels)
  graph replay    use_cuda_graphs on: after the warm-up and the capture, an execute is one
                  cudaGraphLaunch and the provider is not called at all

Target (issue 32): replay cuts the host time by 3x or more. Prints JSON.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from support.test_engine_provider import TestEngineProvider  # noqa: E402  (test helpers)
from support.trt_blob import io, plan_blob  # noqa: E402
from support.trt_host import load_tensorrt_backend  # noqa: E402


def per_call_us(fn, iters):
    for _ in range(max(10, iters // 10)):
        fn()
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        samples.append((time.perf_counter() - t0) / iters * 1e6)
    return sorted(samples)[2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernels", type=int, default=10)
    parser.add_argument("--elements", type=int, default=4096)
    parser.add_argument("--iters", type=int, default=2000)
    args = parser.parse_args()
    trt = load_tensorrt_backend()
    trt.testing.use_cuda_memory()
    provider = TestEngineProvider(on_cuda=True)
    trt.set_engine_provider(provider)
    n = args.elements
    blob, _ = plan_blob("kernels", [io("a", True, [n]), io("o", False, [n])], kernels=args.kernels)
    a = trt.testing.device_alloc(4 * n)
    o = trt.testing.device_alloc(4 * n)
    trt.testing.device_write(a, np.zeros(n, np.float32).tobytes())
    call = [(a, 4 * n, [n], "float32"), (o, 4 * n, [n], "float32")]
    rows, graphs = {}, None
    for label, use_graphs in (("plain enqueue", False), ("graph replay", True)):
        trt.set_load_options(use_cuda_graphs=use_graphs)
        runner = trt.testing.Runner(blob)
        rows[label] = per_call_us(lambda r=runner: r.run(call), args.iters)
        result = np.frombuffer(trt.testing.device_read(o, 4 * n), np.float32)
        assert (result == args.kernels - 1).all(), "wrong answer"
        if use_graphs:
            graphs = runner.graphs()
        del runner
    trt.set_load_options()
    print(
        json.dumps(
            {
                "kernels": args.kernels,
                "elements": n,
                "execute_host_us": rows,
                "speedup": rows["plain enqueue"] / rows["graph replay"],
                "graphs": graphs,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
