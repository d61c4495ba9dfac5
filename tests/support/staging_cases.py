"""Staging cases shared by the CPU run (host-memory stand-in) and the H200 run (CUDA memory).

Each case drives the delegate's real runner (ethost_tensorrt.testing.Runner) with the test
engine provider, which refuses any address off a 256-byte boundary. Device buffers are offsets
into one allocation, so an unaligned device buffer is a real one. A subclass sets memory_kind.
"""

import ethost_tensorrt
import numpy as np
import pytest

from support.test_engine_provider import TestEngineProvider
from support.trt_blob import io, plan_blob

T = ethost_tensorrt.testing
F32 = "float32"


class DeviceArena:
    """One device allocation handed out in pieces at chosen offsets from a 256-byte boundary."""

    def __init__(self, size=1 << 22):
        self.base = T.device_alloc(size)
        self.size = size
        self.used = 0

    def buf(self, nbytes, misalign=0):
        start = (self.used + 255) // 256 * 256 + misalign
        self.used = start + nbytes + 256
        assert self.used <= self.size
        return self.base + start

    def free(self):
        T.device_free(self.base)


def put(addr, array):
    T.device_write(addr, np.ascontiguousarray(array).tobytes())


def get(addr, shape, dtype=np.float32):
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer(T.device_read(addr, n), dtype=dtype).reshape(shape)


def host_array(shape, misalign=0, dtype=np.float32):
    """A numpy array at a chosen offset from a 256-byte boundary (it keeps its backing alive)."""
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.zeros(nbytes + 512, np.uint8)
    off = (-raw.ctypes.data) % 256 + misalign
    return raw[off : off + nbytes].view(dtype).reshape(shape)


def arg(addr, shape, dtype=F32):
    return (addr, int(np.prod(shape)) * np.dtype(dtype).itemsize, list(shape), dtype)


def host_arg(array):
    return (array.ctypes.data, array.nbytes, list(array.shape), array.dtype.name)


def by_name(runner):
    return {c["name"]: c for c in runner.counters()}


def add_blob(shape=(4, 64), dynamic=False):
    if dynamic:
        dims, lo, hi = [-1, shape[1]], [0, shape[1]], [64, shape[1]]
        spec = [
            io("a", True, dims, F32, lo, hi),
            io("b", True, dims, F32, lo, hi),
            io("out", False, dims),
        ]
    else:
        spec = [io("a", True, shape), io("b", True, shape), io("out", False, shape)]
    return plan_blob("add", spec)[0]


def inplace_blob(n=64):
    spec = [io("cache", True, [n]), io("x", True, [n]), io("cache_out", False, [n])]
    return plan_blob("inplace_add", spec, aliased=[("cache_out", "cache")])[0]


class StagingCases:
    memory_kind = "host"

    @pytest.fixture(autouse=True)
    def _memory(self):
        if self.memory_kind == "host":
            T.use_host_memory(reads_pageable_host=False)
        else:
            T.use_cuda_memory()
        self.provider = TestEngineProvider()
        ethost_tensorrt.set_engine_provider(self.provider)
        self.mem = DeviceArena()
        yield
        self.mem.free()
        ethost_tensorrt.set_engine_provider(None)

    def _add_case(self, misalign_a=0, misalign_b=0, misalign_out=0, shape=(4, 64)):
        r = T.Runner(add_blob(shape))
        n = int(np.prod(shape)) * 4
        a, b, o = (
            self.mem.buf(n, misalign_a),
            self.mem.buf(n, misalign_b),
            self.mem.buf(n, misalign_out),
        )
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        put(a, x)
        put(b, x * 10)
        put(o, np.zeros(shape, np.float32))
        r.run([arg(a, shape), arg(b, shape), arg(o, shape)])
        np.testing.assert_array_equal(get(o, shape), x * 11)
        assert not self.provider.misaligned
        return r, (a, b, o)

    def test_aligned_device_buffers_bound_directly(self):
        r, addrs = self._add_case()
        c = by_name(r)
        assert [c[k]["staging_copies"] for k in ("a", "b", "out")] == [0, 0, 0]
        assert [c[k]["direct_calls"] for k in ("a", "b", "out")] == [1, 1, 1]
        assert [addr for _, addr in self.provider.addresses] == list(addrs)

    def test_input_at_16_is_staged_with_one_copy(self):
        r, (a, _, _) = self._add_case(misalign_a=16)
        c = by_name(r)
        assert (c["a"]["staging_copies"], c["a"]["staged_calls"]) == (1, 1)
        assert c["b"]["staging_copies"] == 0 and c["out"]["staging_copies"] == 0
        bound_a = dict(self.provider.addresses)["a"]
        assert bound_a != a and bound_a == c["a"]["stage_address"]

    def test_output_at_16_is_staged_and_copied_back(self):
        r, _ = self._add_case(misalign_out=16)
        c = by_name(r)
        assert (c["out"]["staging_copies"], c["out"]["staged_calls"]) == (1, 1)
        assert c["a"]["staging_copies"] == 0

    def test_unaligned_matmul_input_gives_the_right_answer(self):
        spec = [io("l", True, [8, 16]), io("r", True, [16, 8]), io("out", False, [8, 8])]
        r = T.Runner(plan_blob("matmul", spec)[0])
        lhs = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
        rhs = np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32)
        pl, pr, po = (
            self.mem.buf(lhs.nbytes, 16),
            self.mem.buf(rhs.nbytes, 128),
            self.mem.buf(256, 64),
        )
        put(pl, lhs)
        put(pr, rhs)
        r.run([arg(pl, [8, 16]), arg(pr, [16, 8]), arg(po, [8, 8])])
        np.testing.assert_allclose(get(po, [8, 8]), lhs @ rhs, rtol=1e-5)
        assert sum(c["staging_copies"] for c in r.counters()) == 3

    def _inplace(self, misalign_cache, pass_output, misalign_out=0):
        r = T.Runner(inplace_blob())
        cache, x = self.mem.buf(256, misalign_cache), self.mem.buf(256)
        start = np.arange(64, dtype=np.float32)
        put(cache, start)
        put(x, np.full(64, 0.5, np.float32))
        args = [arg(cache, [64]), arg(x, [64])]
        out = None
        if pass_output:
            out = self.mem.buf(256, misalign_out)
            put(out, np.zeros(64, np.float32))
            args.append(arg(out, [64]))
        r.run(args)
        np.testing.assert_array_equal(get(cache, [64]), start + 0.5)
        if out is not None:
            np.testing.assert_array_equal(get(out, [64]), start + 0.5)
        assert not self.provider.misaligned
        return by_name(r)

    def test_inplace_unaligned_input_with_output_passed(self):
        c = self._inplace(16, pass_output=True)
        # copied in, updated in place on the stage, copied back; then into the separate output
        assert (
            c["cache"]["staging_copies"],
            c["x"]["staging_copies"],
            c["cache_out"]["staging_copies"],
        ) == (2, 0, 1)

    def test_inplace_unaligned_input_with_output_elided(self):
        c = self._inplace(16, pass_output=False)
        assert (c["cache"]["staging_copies"], c["cache_out"]["staging_copies"]) == (2, 0)

    def test_inplace_aligned_input_is_updated_directly(self):
        c = self._inplace(0, pass_output=False)
        assert c["cache"]["staging_copies"] == 0 and c["cache"]["direct_calls"] == 1

    def test_inplace_output_passed_unaligned(self):
        c = self._inplace(0, pass_output=True, misalign_out=16)
        assert (c["cache"]["staging_copies"], c["cache_out"]["staging_copies"]) == (0, 1)

    def test_zero_size_tensors_get_a_valid_aligned_address(self):
        r = T.Runner(add_blob((0, 4), dynamic=True))
        shapes = r.run(
            [(0, 0, [0, 4], F32), (self.mem.buf(0, 16), 0, [0, 4], F32), (0, 64, [8, 4], F32)]
        )
        assert shapes[2] == [0, 4]
        assert self.provider.addresses and all(
            a and a % 256 == 0 for _, a in self.provider.addresses
        )
        assert sum(c["staging_copies"] for c in r.counters()) == 0

    def test_a_buffer_with_bytes_but_no_storage_is_refused(self):
        # Only zero-byte tensors may come without storage (they get a placeholder); a null
        # buffer that claims bytes would let the engine write past the placeholder's end.
        r = T.Runner(add_blob((2, 4)))
        with pytest.raises(RuntimeError, match="InvalidArgument.*'a' has 32 bytes but no storage"):
            r.run(
                [
                    (0, 32, [2, 4], F32),
                    (self.mem.buf(32), 32, [2, 4], F32),
                    (self.mem.buf(32), 32, [2, 4], F32),
                ]
            )
        assert self.provider.addresses == []

    def test_repeated_calls_reuse_staging_buffers(self):
        r = T.Runner(add_blob((8, 64), dynamic=True))
        a = self.mem.buf(64 * 64 * 4, 16)
        b, o = self.mem.buf(64 * 64 * 4), self.mem.buf(64 * 64 * 4)
        first = None
        for _ in range(3):
            put(a, np.ones((8, 64), np.float32))
            put(b, np.ones((8, 64), np.float32))
            r.run([arg(a, [8, 64]), arg(b, [8, 64]), arg(o, [8, 64])])
            stage = by_name(r)["a"]["stage_address"]
            assert first in (None, stage)
            first = stage
        np.testing.assert_array_equal(get(o, [8, 64]), np.full((8, 64), 2, np.float32))
        c = by_name(r)["a"]
        assert (c["staging_copies"], c["stage_capacity"]) == (3, 8 * 64 * 4)
        r.run([arg(a, [32, 64]), arg(b, [32, 64]), arg(o, [32, 64])])  # grows
        assert by_name(r)["a"]["stage_capacity"] == 32 * 64 * 4
        grown = by_name(r)["a"]["stage_address"]
        r.run([arg(a, [2, 64]), arg(b, [2, 64]), arg(o, [2, 64])])  # never shrinks
        assert (by_name(r)["a"]["stage_capacity"], by_name(r)["a"]["stage_address"]) == (
            32 * 64 * 4,
            grown,
        )
        assert r.calls == 5

    def test_host_buffers_are_always_staged_on_a_discrete_gpu(self):
        r = T.Runner(add_blob())
        a, b, o = host_array((4, 64)), host_array((4, 64)), host_array((4, 64))
        a[:] = 1
        b[:] = 2
        r.run([host_arg(a), host_arg(b), host_arg(o)])
        np.testing.assert_array_equal(o, np.full((4, 64), 3, np.float32))
        assert [c["staging_copies"] for c in r.counters()] == [1, 1, 1]

    def test_input_outside_profile_0_is_refused(self):
        r = T.Runner(add_blob((8, 64), dynamic=True))
        a = self.mem.buf(65 * 64 * 4)
        with pytest.raises(RuntimeError, match=r"InvalidArgument .*outside optimization profile 0"):
            r.run([arg(a, [65, 64]), arg(a, [65, 64]), arg(a, [65, 64])])
        with pytest.raises(RuntimeError, match="InvalidArgument .*rank"):
            r.run([arg(a, [64]), arg(a, [64]), arg(a, [64])])

    def test_wrong_argument_count_is_refused(self):
        r = T.Runner(add_blob())
        a = self.mem.buf(1024)
        with pytest.raises(RuntimeError, match="InvalidArgument .*2 arguments"):
            r.run([arg(a, [4, 64]), arg(a, [4, 64])])

    def test_wrong_dtype_is_refused(self):
        r = T.Runner(add_blob())
        a = self.mem.buf(1024)
        with pytest.raises(RuntimeError, match="InvalidArgument .*int32"):
            r.run([arg(a, [4, 64], "int32"), arg(a, [4, 64]), arg(a, [4, 64])])

    def test_blob_and_engine_binding_counts_must_match(self):
        from support.trt_blob import make_blob, metadata, plan_bytes

        plan = plan_bytes("add", [io("a", True, [4]), io("b", True, [4]), io("out", False, [4])])
        with pytest.raises(RuntimeError, match="InvalidProgram .*2 bindings but the engine has 3"):
            T.Runner(make_blob(metadata([("a", True), ("out", False)]), plan))

    def test_engine_shared_and_one_stream_per_runner(self):
        blob = add_blob()
        r1, r2 = T.Runner(blob), T.Runner(blob)
        assert self.provider.deserialized == 1
        assert r1.stream != r2.stream
        buf = [self.mem.buf(1024) for _ in range(3)]
        r1.run([arg(p, [4, 64]) for p in buf])
        r2.run([arg(p, [4, 64]) for p in buf])
        assert self.provider.streams == [r1.stream, r2.stream]
        labels = {d["delegate"] for d in ethost_tensorrt.staging_counters()}
        assert {r1.label, r2.label} <= labels

    def test_a_steady_execute_enters_the_provider_once_and_rebinds_only_what_moved(self):
        r = T.Runner(add_blob((8, 64), dynamic=True))
        bufs = [self.mem.buf(64 * 64 * 4) for _ in range(3)]

        def run(rows, out=None):
            addrs = bufs[:2] + [out or bufs[2]]
            r.run([arg(p, [rows, 64]) for p in addrs])

        entries = ethost_tensorrt.provider_gil_entries()
        for _ in range(3):
            run(8)  # the first call infers the output shape, inside the same entry
        assert ethost_tensorrt.provider_gil_entries() - entries == 3
        assert self.provider.calls == {"infer_shapes": 1, "execute": 3}
        assert [name for name, _ in self.provider.addresses] == ["a", "b", "out"]
        run(4)  # new shapes: inferred again
        run(8)  # shapes seen before: carried by execute, not inferred
        assert self.provider.calls == {"infer_shapes": 2, "execute": 5}
        assert ethost_tensorrt.provider_gil_entries() - entries == 5
        moved = self.mem.buf(64 * 64 * 4)
        run(8, out=moved)
        assert self.provider.addresses[3:] == [("out", moved)]
        assert ethost_tensorrt.provider_gil_entries() - entries == 6
