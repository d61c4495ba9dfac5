"""Staging and realignment through the host-memory stand-in for a GPU (tests/gpu reruns the
shared cases on CUDA memory), plus the cases only a simulated Jetson-like device can show."""

import ethost_tensorrt
import numpy as np
import pytest

from support.staging_cases import StagingCases, add_blob, by_name, host_arg, host_array
from support.test_engine_provider import TestEngineProvider

T = ethost_tensorrt.testing


class TestStagingHostMemory(StagingCases):
    memory_kind = "host"


@pytest.fixture
def pageable_device():
    T.use_host_memory(reads_pageable_host=True)
    provider = TestEngineProvider()
    ethost_tensorrt.set_engine_provider(provider)
    yield provider
    ethost_tensorrt.set_engine_provider(None)
    T.use_host_memory(reads_pageable_host=False)


def test_aligned_host_buffers_bound_directly_where_the_gpu_reads_pageable_memory(pageable_device):
    r = T.Runner(add_blob())
    a, b, o = host_array((4, 64)), host_array((4, 64)), host_array((4, 64))
    a[:] = 1
    b[:] = 2
    r.run([host_arg(a), host_arg(b), host_arg(o)])
    np.testing.assert_array_equal(o, np.full((4, 64), 3, np.float32))
    assert [c["staging_copies"] for c in r.counters()] == [0, 0, 0]
    assert [addr for _, addr in pageable_device.addresses] == [
        a.ctypes.data,
        b.ctypes.data,
        o.ctypes.data,
    ]


def test_unaligned_host_buffer_still_staged_where_the_gpu_reads_pageable_memory(pageable_device):
    r = T.Runner(add_blob())
    a, b, o = (
        host_array((4, 64), misalign=16),
        host_array((4, 64)),
        host_array((4, 64), misalign=32),
    )
    a[:] = 1
    b[:] = 2
    r.run([host_arg(a), host_arg(b), host_arg(o)])
    np.testing.assert_array_equal(o, np.full((4, 64), 3, np.float32))
    c = by_name(r)
    assert (c["a"]["staging_copies"], c["b"]["staging_copies"], c["out"]["staging_copies"]) == (
        1,
        0,
        1,
    )
    assert not pageable_device.misaligned


def test_host_memory_tells_its_allocations_from_host_memory():
    """Copy directions are checked against this, so a wrong staging decision fails on CPU CI."""
    T.use_host_memory(reads_pageable_host=False)
    dev = T.device_alloc(256)
    try:
        T.device_write(dev, b"x" * 16)
        assert T.device_read(dev, 1) == b"x"
        assert T.is_device_pointer(dev + 255) and not T.is_device_pointer(dev + 256)
    finally:
        T.device_free(dev)


def test_no_cuda_device_is_reported_cleanly():
    try:
        T.use_cuda_memory()
    except RuntimeError as e:
        assert "NotSupported" in str(e) and ("CUDA" in str(e))
        assert "CUDA" in ethost_tensorrt.device_status()
        assert ethost_tensorrt.memory_kind() is None
    else:
        assert ethost_tensorrt.device_status() is None and ethost_tensorrt.memory_kind() == "cuda"
    finally:
        T.use_host_memory()
