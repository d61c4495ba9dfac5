"""Backend setup for servers under test (tests only, never shipped):
`python -m service --backend-setup support.test_backend_setup:install_test_backend`.

It replaces the default setup (service.backends.tensorrt.runtime:install_backend) so that a CPU
host can take TensorRT-delegated programs through the whole service -- ingest checks, the
load-check child and serving -- with the test engine provider standing in for TensorRT and host
memory standing in for the GPU. The server and every load-check child run it, so both see the
same stand-in.
"""

import os

from support.test_engine_provider import TestEngineProvider
from support.trt_host import load_tensorrt_backend


def install_test_backend(reads_pageable_host: bool = False, device_bytes: int = 0) -> None:
    trt = load_tensorrt_backend()
    trt.testing.use_host_memory(reads_pageable_host, device_bytes)
    trt.set_engine_provider(TestEngineProvider())


def install_test_backend_sized_device() -> None:
    """A discrete stand-in GPU of ETRT_TEST_DEVICE_BYTES bytes: what the test provider's engines
    and contexts allocate on it is used, the rest free, so GPU memory admission is exercised
    without a GPU."""
    install_test_backend(device_bytes=int(os.environ["ETRT_TEST_DEVICE_BYTES"]))


def install_test_backend_reading_host_memory() -> None:
    """A stand-in GPU that reads pageable host memory, as a Jetson does. A discrete one (the
    default) cannot, so the delegate stages every host buffer; this one stages a buffer only
    for its alignment, which is what ingest predicts per call from the planned offsets."""
    install_test_backend(reads_pageable_host=True)


def install_test_backend_on_cuda() -> None:
    """The test engine provider on real CUDA memory (GPU hosts): the delegate's bindings,
    staging and the host's device inputs are the production code on the device; only the
    engine is a stand-in."""
    trt = load_tensorrt_backend()
    trt.testing.use_cuda_memory()
    trt.set_engine_provider(TestEngineProvider(on_cuda=True))


def install_spin_backend_on_cuda() -> None:
    """The spin provider (spin_engine_provider.py) on real CUDA memory: every execute a kernel
    of a configured duration on the delegate's stream, for measuring how busy the server keeps
    a GPU (bench/bench_gpu_busy.py)."""
    from support.spin_engine_provider import SpinEngineProvider

    trt = load_tensorrt_backend()
    trt.testing.use_cuda_memory()
    trt.set_engine_provider(SpinEngineProvider())


def install_spin_backend_on_host() -> None:
    """The spin provider's CPU proxy (spin_engine_provider.HostSpinEngineProvider) on host
    memory: executes of a configured duration that never overlap, for measuring the scheduler
    on a machine without a GPU (bench/bench_gpu_busy.py --backend)."""
    from support.spin_engine_provider import HostSpinEngineProvider

    trt = load_tensorrt_backend()
    trt.testing.use_host_memory(False, 0)
    trt.set_engine_provider(HostSpinEngineProvider())
