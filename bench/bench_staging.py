"""Per-call cost of a staged binding vs a directly bound one, next to a bare copy of the same
bytes in the same run (H200: `python bench/bench_staging.py`).

The engine is a no-op stand-in (its enqueue does nothing), so a call's time is the delegate's
own work: binding, staging copies, stream synchronize. "staged" puts the input 16 bytes off a
256-byte boundary (one device-to-device copy per call); "host" passes a pageable host array
(one host-to-device copy). The bare rows time cudaMemcpyAsync + cudaStreamSynchronize of the same
bytes through libcudart directly. `--memory host` runs the same code on the host-memory stand-in
(a smoke test for machines without CUDA; its numbers mean nothing).
"""

import argparse
import ctypes
import json
import sys
from pathlib import Path

import ethost_tensorrt
import numpy as np
from ethost_tensorrt import testing as T

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from delegate_timing import NullEngineProvider, per_call_us  # noqa: E402
from support.trt_blob import make_blob, metadata  # noqa: E402  (test helpers live under tests/)

SIZES = {"1 MiB": 1 << 20, "64 MiB": 64 << 20}


def blob_for(n_floats):
    io = [
        {
            "name": "x",
            "is_input": True,
            "dtype": "float32",
            "shape": [n_floats],
            "profile_min": None,
            "profile_max": None,
        },
        {
            "name": "y",
            "is_input": False,
            "dtype": "float32",
            "shape": [n_floats],
            "profile_min": None,
            "profile_max": None,
        },
    ]
    return make_blob(metadata([("x", True), ("y", False)]), json.dumps(io).encode())


class BareCopy:
    """cudaMemcpyAsync + cudaStreamSynchronize through ctypes (memmove on the host stand-in)."""

    def __init__(self, memory):
        self.memory = memory
        if memory == "cuda":
            for name in (
                "libcudart.so.13",
                "libcudart.so",
                "/usr/local/cuda/lib64/libcudart.so.13",
            ):
                try:
                    self.rt = ctypes.CDLL(name)
                    break
                except OSError:
                    continue
            else:
                raise SystemExit("libcudart not found")
            self.stream = ctypes.c_void_p()
            assert self.rt.cudaStreamCreate(ctypes.byref(self.stream)) == 0

    def __call__(self, dst, src, n, kind):
        if self.memory != "cuda":
            ctypes.memmove(dst, src, n)
            return
        rc = self.rt.cudaMemcpyAsync(
            ctypes.c_void_p(dst),
            ctypes.c_void_p(src),
            ctypes.c_size_t(n),
            ctypes.c_int(kind),
            self.stream,
        )
        assert rc == 0 and self.rt.cudaStreamSynchronize(self.stream) == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--memory", choices=["cuda", "host"], default="cuda")
    ap.add_argument(
        "--iters", type=int, default=200, help="calls per sample at 1 MiB (scaled down for larger)"
    )
    args = ap.parse_args()
    if args.memory == "host":
        T.use_host_memory()
    elif ethost_tensorrt.device_status() is not None:
        raise SystemExit(f"cannot benchmark on CUDA: {ethost_tensorrt.device_status()}")
    ethost_tensorrt.set_engine_provider(NullEngineProvider())
    bare = BareCopy(args.memory)
    rows = []
    for label, n in SIZES.items():
        iters = max(10, args.iters * (1 << 20) // n)
        runner = T.Runner(blob_for(n // 4))
        base = T.device_alloc(3 * n + 1024)
        x_direct, x_staged, y = base, base + n + 256 + 16, base + 2 * n + 768
        host = np.ones(n // 4, np.float32)

        def call(xaddr):
            return lambda: runner.run(
                [(xaddr, n, [n // 4], "float32"), (y, n, [n // 4], "float32")]
            )

        direct = per_call_us(call(x_direct), iters)
        staged = per_call_us(call(x_staged), iters)
        hosted = per_call_us(call(host.ctypes.data), iters)
        d2d = per_call_us(lambda: bare(y, x_staged, n, 3), iters)
        h2d = per_call_us(lambda: bare(y, host.ctypes.data, n, 1), iters)
        counters = {c["name"]: c["staging_copies"] for c in runner.counters()}
        assert counters["y"] == 0 and counters["x"] > 0
        rows.append((label, direct, staged, d2d, hosted, h2d))
        T.device_free(base)
    print(f"memory: {args.memory}; per-call microseconds (median of 5 samples)")
    head = (
        "size",
        "direct",
        "staged(+16)",
        "bare D2D",
        "(staged-direct)/D2D",
        "host",
        "bare H2D",
        "(host-direct)/H2D",
    )
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for label, direct, staged, d2d, hosted, h2d in rows:
        print(
            f"| {label} | {direct:.1f} | {staged:.1f} | {d2d:.1f} | "
            f"{(staged - direct) / d2d:.2f} | {hosted:.1f} | {h2d:.1f} | "
            f"{(hosted - direct) / h2d:.2f} |"
        )


if __name__ == "__main__":
    main()
