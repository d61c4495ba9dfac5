"""The fronts' arenas on a real GPU (H200): pinned by the engine, and request inputs placed in
them need no staging copy for alignment -- only the host-to-device copy a discrete GPU needs
for any host buffer, which pinning makes a pinned one."""

import ctypes
import sys
from pathlib import Path

import ethost
import numpy as np
import pytest

from service.engine import pinning
from service.shared.arena import Arena, Region
from support.trt_host import load_tensorrt_backend

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from bench_staging import blob_for  # noqa: E402
from delegate_timing import NullEngineProvider  # noqa: E402

pytestmark = pytest.mark.gpu
trt = load_tensorrt_backend()
T = trt.testing
IMAGE_BYTES = 3 * 224 * 224 * 4


class _Attributes(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("device", ctypes.c_int),
        ("dev", ctypes.c_void_p),
        ("host", ctypes.c_void_p),
        ("reserved", ctypes.c_long * 8),
    ]


def memory_type(address: int) -> int:
    """cudaPointerGetAttributes' type: 0 unregistered, 1 host (registered), 2 device."""
    rt = ctypes.CDLL("libcudart.so.13")
    attrs = _Attributes()
    assert rt.cudaPointerGetAttributes(ctypes.byref(attrs), ctypes.c_void_p(address)) == 0
    return attrs.type


@pytest.fixture
def runner():
    T.use_cuda_memory()
    trt.set_engine_provider(NullEngineProvider())
    yield T.Runner(blob_for(IMAGE_BYTES // 4))
    trt.set_engine_provider(None)


def test_the_engine_pins_a_fronts_arena_and_unpins_it(runner):
    arena = Arena(64 << 20)
    region = Region(arena.fd, arena.size)  # mapped as the engine maps a front's memfd
    assert memory_type(region.address) == 0
    assert pinning.pin(region) is True
    assert memory_type(region.address) == 1 and memory_type(region.address + arena.size - 256) == 1
    # The front's own mapping of the same pages is a different address: not registered.
    assert memory_type(arena.region.address) == 0
    pinning.unpin(region)
    assert memory_type(region.address) == 0


def test_inputs_in_an_aligned_slot_need_no_misaligned_copy(runner):
    arena = Arena(16 << 20)
    region = Region(arena.fd, arena.size)
    assert pinning.pin(region)
    try:
        slot = arena.allocate(IMAGE_BYTES + 256)
        x = region.address + slot.offset
        n = IMAGE_BYTES
        region.array(slot.offset, np.dtype(np.float32), (n // 4,))[...] = 1.0
        y = T.device_alloc(n)
        try:
            args = [(x, n, [n // 4], "float32"), (y, n, [n // 4], "float32")]
            for _ in range(3):
                runner.run(args)
            counters = {c["name"]: c for c in runner.counters()}
            # Copied to the device (a host buffer on a discrete GPU), never for alignment.
            assert counters["x"]["staging_copies"] == 3
            assert counters["x"]["misaligned_copies"] == 0
            runner.run([(x + 16, n, [n // 4], "float32"), (y, n, [n // 4], "float32")])
            counters = {c["name"]: c for c in runner.counters()}
            assert counters["x"]["misaligned_copies"] == 1
        finally:
            T.device_free(y)
    finally:
        pinning.unpin(region)


def test_pinning_says_no_on_a_host_that_needs_none_rather_than_failing():
    # Zero bytes: CUDA refuses to register nothing; the engine then runs the arena unpinned.
    with pytest.raises(RuntimeError):
        ethost.pin_host_memory(0, 0)
