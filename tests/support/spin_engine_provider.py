"""A stand-in for a TensorRT engine of known cost, for tests and benchmarks only (never shipped).

The test engine provider (test_engine_provider.py) computes on the host after synchronizing
the delegate's stream: right for checking bindings, useless for asking whether the server
keeps a GPU busy. This variant computes its op (add, scale) in a real CUDA kernel enqueued on
the stream the delegate gives, and returns at once, as TensorRT's enqueue does; the kernel then
spins on clock64 until `base_us + per_row_us * rows` have passed (rows: dim 0 of the first
input), so the GPU is truly busy for a known time per batch.

Each launch takes every SM with one block that holds most of the SM's shared memory, so two
launches (from two instances' streams) cannot share the GPU: they run one after the other, as
two executes of a real engine that fills the GPU would. The kernel-bound limit of a run is then
rows / (base_us + per_row_us * rows) per second.

Kernel time is accounted on the GPU's own clock: block 0 of each launch writes its start and end
(%globaltimer, ns) and its rows into one record of a ring in a file mapped here and registered
with CUDA (ETRT_TEST_SPIN_STATS), which the benchmark reads from its own process
(bench/bench_gpu_busy.py: Kernels): the union of the intervals over the span they cover is
the fraction of time a kernel held the GPU. The clock rate that turns microseconds into cycles
is the device's highest; the records say what actually ran. The kernel numbers its own record
(a counter in device memory, started at the file's count), so that launches the delegate
replays from a CUDA graph, which never call the provider, are each recorded too.

Configured by the environment of the engine process: ETRT_TEST_SPIN_US (base, default 200),
ETRT_TEST_SPIN_ROW_US (per row, default 0), ETRT_TEST_SPIN_STATS (a path on tmpfs, e.g.
/dev/shm, since Linux pins a file's pages for a device only when shmem backs them; none: no
accounting).
Needs cupy (the GPU host has it).
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from support.test_engine_provider import TestEngineProvider

# One block per SM: with this much dynamic shared memory a second block cannot fit beside it.
_SHARED_BYTES = 160 * 1024
_THREADS = 256
RING = 1 << 20  # records: (start ns, end ns, rows), after a header of one u64 (launches)
_SOURCE = r"""
extern "C" __global__ void spin_op(const float* a, const float* b, float* out,
                                   unsigned long long n, int op, long long cycles,
                                   unsigned long long* ring, unsigned long long* launches,
                                   unsigned long long rows) {
  extern __shared__ char hold[];  // only held, so that the block has its SM to itself
  unsigned long long started;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(started));
  long long begun = clock64();
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    out[i] = op == 0 ? a[i] + b[i] : a[i] * 2.0f;
  }
  if (threadIdx.x == 0) {
    hold[0] = 0;
    while (clock64() - begun < cycles) {
    }
    if (blockIdx.x == 0 && ring != 0) {
      unsigned long long ended;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ended));
      unsigned long long launch = atomicAdd(launches, 1ULL);
      unsigned long long* record = ring + 1 + 3 * (launch % RING_RECORDS);
      record[0] = started;
      record[1] = ended;
      record[2] = rows;
      __threadfence_system();  // the record before the count that makes it readable
      ring[0] = launch + 1;
      __threadfence_system();
    }
  }
}
""".replace("RING_RECORDS", f"{RING}ULL")
_OPS = {"add": 0, "scale": 1}


def spin_records(path: str) -> np.ndarray:
    """The accounting file as uint64s: [launches, then RING records of 3]; made when absent and
    never truncated (the engine and its load-check child map the same file)."""
    shape = (1 + 3 * RING,)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size < 8 * shape[0]:
            os.ftruncate(fd, 8 * shape[0])
    finally:
        os.close(fd)
    return np.memmap(path, dtype=np.uint64, mode="r+", shape=shape)


class SpinEngineProvider(TestEngineProvider):
    """The test engine provider whose executes are CUDA kernels of a configured duration."""

    __test__ = False

    def __init__(self, base_us: float | None = None, per_row_us: float | None = None):
        super().__init__(on_cuda=True)
        import cupy

        self._cupy = cupy
        env = os.environ
        self.base_us = float(base_us if base_us is not None else env.get("ETRT_TEST_SPIN_US", 200))
        self.per_row_us = float(
            per_row_us if per_row_us is not None else env.get("ETRT_TEST_SPIN_ROW_US", 0)
        )
        kernel = cupy.RawKernel(_SOURCE, "spin_op")
        kernel.max_dynamic_shared_size_bytes = _SHARED_BYTES
        self._launch = kernel.kernel  # the compiled function: launched on a stream it is given
        device = cupy.cuda.Device()
        self._grid, self._block = (device.attributes["MultiProcessorCount"],), (_THREADS,)
        self._streams: dict[int, object] = {}  # the delegate's stream handles, wrapped once
        # kHz -> cycles per us; CUDA 13 may leave the attribute out: the H200's highest, 1980 MHz
        self._cycles_per_us = device.attributes.get("ClockRate", 1_980_000) / 1000.0
        path = env.get("ETRT_TEST_SPIN_STATS")
        self._records = spin_records(path) if path else None
        self._ring = 0 if path is None else self._device_pointer(self._records)
        # Numbered on from the file's count: the load check's process may have recorded first.
        start = 0 if self._records is None else int(self._records[0])
        self._launches = cupy.full(1, start, dtype=cupy.uint64)

    def _device_pointer(self, records: np.ndarray) -> int:
        """The mapped file's pages, pinned and visible to the GPU (a kernel writes there)."""
        runtime = self._cupy.cuda.runtime
        host = records.ctypes.data
        runtime.hostRegister(host, records.nbytes, 2)  # cudaHostRegisterMapped
        from cuda.bindings import runtime as rt

        error, device = rt.cudaHostGetDevicePointer(host, 0)
        if error != rt.cudaError_t.cudaSuccess:
            raise RuntimeError(f"cudaHostGetDevicePointer: {error}")
        return int(device)

    def close(self) -> None:
        """Unpins the records: a later provider may map a file at the same address, and CUDA
        refuses to register a range twice (cudaErrorHostMemoryAlreadyRegistered)."""
        if self._ring:
            self._cupy.cuda.runtime.hostUnregister(self._records.ctypes.data)
            self._ring = 0

    def cycles(self, rows: int) -> int:
        return int((self.base_us + self.per_row_us * rows) * self._cycles_per_us)

    def execute(self, ctx, input_shapes, addresses, stream):
        """Enqueues the spin kernel on `stream`, as TensorRT's execute_async_v3 enqueues an
        engine. The launch's arguments are worked out again only when the context's shapes
        (set here or by infer_shapes) or bindings change, so that an execute in the steady state
        is one launch call under the GIL, as service/backends/tensorrt/runtime.py's is: worked
        out on every call, the stand-in's own Python was most of what held the engine's GIL
        (py-spy --gil on the GPU host, batch 1), a cost the engine it stands for has not."""
        self.calls["execute"] += 1
        if input_shapes is not None:
            self._set_shapes(ctx, input_shapes)
        if addresses is not None:
            for t, address in zip(ctx.engine.spec["io"], addresses, strict=True):
                if ctx.addresses.get(t["name"]) != address:
                    self._bind(ctx, t["name"], address)
        args = getattr(ctx, "spin_args", None)
        if args is None:
            args = ctx.spin_args = self._arguments(ctx)
        on = self._streams.get(stream)
        if on is None:
            on = self._streams[stream] = self._cupy.cuda.ExternalStream(stream)
        self._launch(self._grid, self._block, args, shared_mem=_SHARED_BYTES, stream=on)

    def _set_shapes(self, ctx, shapes):
        super()._set_shapes(ctx, shapes)  # by execute or by infer_shapes before it
        ctx.spin_args = None

    def _bind(self, ctx, name, address):
        super()._bind(ctx, name, address)
        ctx.spin_args = None

    def _arguments(self, ctx) -> tuple:
        """The kernel's arguments for the context's shapes and bindings."""
        e = ctx.engine
        op = e.spec["op"]
        if op not in _OPS or any(t["dtype"] != "float32" for t in e.spec["io"]):
            raise ValueError(f"the spin provider runs FP32 add and scale, not {op!r}")
        shape = ctx.shapes[e.inputs[0]["name"]]
        rows = int(shape[0]) if shape else 1
        n = int(np.prod(shape))
        a = ctx.addresses[e.inputs[0]["name"]]
        b = ctx.addresses[e.inputs[-1]["name"]]
        out = ctx.addresses[e.outputs[0]["name"]]
        args = (np.uint64(a), np.uint64(b), np.uint64(out), np.uint64(n), np.int32(_OPS[op]))
        args += (np.int64(self.cycles(rows)), np.uint64(self._ring))
        return args + (np.uint64(self._launches.data.ptr), np.uint64(rows))


class HostSpinEngineProvider(TestEngineProvider):
    """The spin provider's CPU proxy, for measuring the scheduler on a host without a GPU: each
    execute computes on host memory (as the test provider does), then queues `base_us +
    per_row_us * rows` of work on a simulated device that runs one launch at a time (as the spin
    kernel holds every SM), on its own timeline: a launch starts when it is queued or when the
    one before it ends, whichever is later, whatever the launching thread does meanwhile. The
    thread then sleeps (GIL released, as in a stream synchronize) until its launch ends. Records
    go to the same ring (ETRT_TEST_SPIN_STATS) on CLOCK_MONOTONIC, so bench_gpu_busy.py reads
    them unchanged."""

    __test__ = False

    def __init__(self):
        super().__init__(on_cuda=False)
        env = os.environ
        self.base_us = float(env.get("ETRT_TEST_SPIN_US", 200))
        self.per_row_us = float(env.get("ETRT_TEST_SPIN_ROW_US", 0))
        path = env.get("ETRT_TEST_SPIN_STATS")
        self._records = spin_records(path) if path else None
        self._device = threading.Lock()  # guards the timeline and the records
        self._free_at = 0  # when the last launch queued ends, ns

    def execute(self, ctx, input_shapes, addresses, stream, scratch=None):
        if input_shapes is not None:
            self._set_shapes(ctx, input_shapes)
        shape = ctx.shapes[ctx.engine.inputs[0]["name"]]
        rows = int(shape[0]) if shape else 1
        # Queued first, as a kernel launch is: the host's own arithmetic below is the stand-in's
        # cost, not the device's.
        with self._device:
            started = max(time.monotonic_ns(), self._free_at)
            ended = self._free_at = started + int((self.base_us + self.per_row_us * rows) * 1e3)
            if self._records is not None:
                launch = int(self._records[0])
                at = 1 + 3 * (launch % RING)
                self._records[at : at + 3] = (started, ended, rows)
                self._records[0] = launch + 1
        super().execute(ctx, None, addresses, stream, scratch)
        time.sleep(max(0, ended - time.monotonic_ns()) / 1e9)
