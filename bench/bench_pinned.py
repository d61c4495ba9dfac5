"""The TensorRT delegate's host-to-device copy of a request input: from a pinned front arena vs
from pageable memory, next to bare copies of the same bytes, in one run (H200:
`python bench/bench_pinned.py`).

The engine provider computes nothing, so a call's time is the delegate's own work: binding, the
copy of the 1x3x224x224 FP32 input (602,112 bytes) to the device, stream synchronize. "arena" is a
256-byte aligned slot of an arena pinned the way the engine pins every front's arena; "pageable"
a numpy array. The bare rows are cudaMemcpyAsync + cudaStreamSynchronize through libcudart.
Goal (issue 15): arena <= 1.2x the bare pinned copy, and no misaligned staging copy.
"""

import sys
from pathlib import Path

import ethost_tensorrt
import numpy as np
from ethost_tensorrt import testing as T

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_staging import BareCopy, blob_for  # noqa: E402
from delegate_timing import NullEngineProvider, per_call_us  # noqa: E402
from service.engine import pinning  # noqa: E402
from service.shared.arena import Arena, Region  # noqa: E402

N = 3 * 224 * 224 * 4


def main():
    if ethost_tensorrt.device_status() is not None:
        raise SystemExit(f"needs CUDA: {ethost_tensorrt.device_status()}")
    ethost_tensorrt.set_engine_provider(NullEngineProvider())
    bare = BareCopy("cuda")
    arena = Arena(64 << 20)
    region = Region(arena.fd, arena.size)
    assert pinning.pin(region), "the arena could not be pinned"
    slot = arena.allocate(N)
    pinned = region.address + slot.offset
    pageable = np.ones(N // 4, np.float32)
    region.array(slot.offset, np.dtype(np.float32), (N // 4,))[...] = 1.0
    from_arena, from_pageable = T.Runner(blob_for(N // 4)), T.Runner(blob_for(N // 4))
    y = T.device_alloc(N)

    def call(runner, x):
        return lambda: runner.run([(x, N, [N // 4], "float32"), (y, N, [N // 4], "float32")])

    rows = {
        "delegate, input in the pinned arena": per_call_us(call(from_arena, pinned), 2000),
        "delegate, input in pageable memory": per_call_us(
            call(from_pageable, pageable.ctypes.data), 2000
        ),
        "bare H2D copy from pinned memory": per_call_us(lambda: bare(y, pinned, N, 1), 2000),
        "bare H2D copy from pageable memory": per_call_us(
            lambda: bare(y, pageable.ctypes.data, N, 1), 2000
        ),
    }
    counters = {c["name"]: c for c in from_arena.counters()}
    print("602,112-byte input; per-call microseconds (median of 5 samples)")
    for label, us in rows.items():
        print(f"  {label:<40} {us:8.1f} us  ({N / us / 1e3:.1f} GB/s)")
    ratio = rows["delegate, input in the pinned arena"] / rows["bare H2D copy from pinned memory"]
    verdict = "met" if ratio <= 1.2 else "MISSED"
    print(f"  arena / bare pinned copy: {ratio:.2f}x (goal <= 1.2x: {verdict})")
    print(
        f"  input from the arena: {counters['x']['staging_copies']} copies to the device, "
        f"{counters['x']['misaligned_copies']} of them for alignment"
    )
    T.device_free(y)
    pinning.unpin(region)


if __name__ == "__main__":
    main()
