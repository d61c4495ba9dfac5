"""Backend setup for servers under test (tests only, never shipped):
`python -m service --backend-setup support.test_backend_setup:install_test_backend`.

It replaces the default setup (service.tensorrt_runtime:install_backend) so that a CPU host can
take TensorRT-delegated programs through the whole service -- ingest checks, the load-check child
and serving -- with the test engine provider standing in for TensorRT and host memory standing in
for the GPU. The server and every load-check child run it, so both see the same stand-in.
"""
from support.test_engine_provider import TestEngineProvider
from support.trt_host import load_tensorrt_backend


def install_test_backend() -> None:
    trt = load_tensorrt_backend()
    trt.testing.use_host_memory()
    trt.set_engine_provider(TestEngineProvider())
