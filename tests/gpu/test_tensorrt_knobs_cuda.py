"""The TensorRT delegate's knobs on real CUDA memory (H200): the runner and the test engine
provider, whose engines hold their weights and contexts in cudaMalloc'd memory, so device
figures are read from cudaMemGetInfo (ethost_tensorrt.device_memory_info).

- weight streaming: the budget reaches the engine before its context, and the device holds the
  non-streamable weights plus the budget;
- CUDA graphs: the first call of a shape and addresses runs plainly, the second captures, later
  ones replay without reaching the provider; an engine that cannot be captured falls back after
  3 failed captures, saying why, and still answers right;
- shared engines: two models of the same plan bytes take one engine's device memory;
- shared activation scratch: contexts take the largest one's memory between them;
- admission: a model larger than the free memory is refused naming both figures.
"""

import numpy as np
import pytest

from service.backends.tensorrt.loading import admit
from service.errors import DeviceMemoryFull
from service.model_config.parameters import TensorRTParameters
from support.test_engine_provider import TestEngineProvider
from support.trt_blob import io, plan_blob
from support.trt_host import load_tensorrt_backend

pytestmark = pytest.mark.gpu
trt = load_tensorrt_backend()
MiB = 1 << 20
N = 1024  # float32 elements per tensor


@pytest.fixture
def provider():
    trt.testing.use_cuda_memory()
    assert trt.memory_kind() == "cuda"
    p = TestEngineProvider(on_cuda=True)
    trt.set_engine_provider(p)
    yield p
    trt.set_load_options()
    trt.set_engine_provider(None)


def blob(op="kernels", stats=None, **extra):
    made, _ = plan_blob(op, [io("a", True, [N]), io("o", False, [N])], stats=stats or {}, **extra)
    return made


class Buffers:
    def __init__(self):
        self.a = trt.testing.device_alloc(4 * N)
        self.o = trt.testing.device_alloc(4 * N)
        trt.testing.device_write(self.a, np.arange(N, dtype=np.float32).tobytes())

    def run(self, runner, out=None):
        out = out or self.o
        runner.run([(self.a, 4 * N, [N], "float32"), (out, 4 * N, [N], "float32")])
        return np.frombuffer(trt.testing.device_read(out, 4 * N), np.float32)


def free_bytes():
    return trt.device_memory_info()[0]


def test_a_budget_keeps_the_non_streamable_weights_and_the_budget_on_the_device(provider):
    stats = {"total_weights_size": 512 * MiB, "streamable_weights_size": 384 * MiB}
    before = free_bytes()
    trt.set_load_options(weight_streaming_budget_bytes=64 * MiB)
    runner = trt.testing.Runner(blob("scale", stats))
    taken = before - free_bytes()
    assert provider.budgets == [64 * MiB]
    assert runner.engine_stats["weight_streaming_budget"] == 64 * MiB
    # 128 MiB not streamable + the 64 MiB budget (+ allocation granularity and the stream).
    assert 192 * MiB <= taken <= 200 * MiB, taken


def test_graphs_capture_on_the_second_call_and_replay_without_the_provider(provider):
    trt.set_load_options(use_cuda_graphs=True)
    runner = trt.testing.Runner(blob(kernels=10))
    buffers = Buffers()
    expected = np.arange(N, dtype=np.float32) + 9
    for _ in range(5):
        np.testing.assert_array_equal(buffers.run(runner), expected)
    graphs = runner.graphs()
    assert graphs == {
        "requested": True,
        "replaying": True,
        "reason": "",
        "captures": 1,
        "failed_captures": 0,
        "replays": 4,
    }
    assert provider.calls["execute"] == 2  # the warm-up and the captured one
    # Another output address: a plain call again, then a new capture.
    other = trt.testing.device_alloc(4 * N)
    for _ in range(3):
        np.testing.assert_array_equal(buffers.run(runner, other), expected)
    assert runner.graphs()["captures"] == 2
    assert provider.calls["execute"] == 4


def test_an_engine_that_cannot_be_captured_falls_back_and_says_why(provider):
    trt.set_load_options(use_cuda_graphs=True)
    runner = trt.testing.Runner(blob("scale"))  # synchronizes its stream: not capturable
    buffers = Buffers()
    for _ in range(6):
        np.testing.assert_array_equal(buffers.run(runner), np.arange(N, dtype=np.float32) * 2)
    graphs = runner.graphs()
    assert (graphs["replaying"], graphs["captures"], graphs["failed_captures"]) == (False, 0, 3)
    assert graphs["reason"].startswith("capture failed 3 times: ")


def test_two_models_with_the_same_plan_take_one_engines_device_memory(provider):
    stats = {"total_weights_size": 1024 * MiB, "device_memory_size": 16 * MiB}
    before = free_bytes()
    trt.set_instance_owner("model-a")
    first = trt.testing.Runner(blob("scale", stats))
    one = before - free_bytes()
    trt.set_instance_owner("model-b")
    second = trt.testing.Runner(blob("scale", stats))
    two = before - free_bytes()
    trt.set_instance_owner("")
    assert provider.deserialized == 1
    assert one >= 1040 * MiB
    assert two <= 1.1 * one, (one, two)
    # Without sharing, the second model holds its own copy: the measurement sees it.
    trt.set_load_options(use_shared_engines=False)
    third = trt.testing.Runner(blob("scale", stats))
    assert before - free_bytes() >= two + 1024 * MiB
    del first, second, third


def test_contexts_on_the_shared_scratch_take_the_largest_ones_memory_not_the_sum(provider):
    # Graphs asked for too: the reason they do not replay is then the scratch's, not "off".
    trt.set_load_options(use_shared_activation_scratch=True, use_cuda_graphs=True)
    before = free_bytes()
    runners = [
        trt.testing.Runner(blob("kernels", {"device_memory_size": size * MiB}, kernels=2))
        for size in (256, 512, 128)
    ]
    buffers = Buffers()
    for runner in runners:
        np.testing.assert_array_equal(buffers.run(runner), np.arange(N, dtype=np.float32) + 1)
    taken = before - free_bytes()
    assert trt.shared_scratch_bytes() == 512 * MiB
    assert 512 * MiB <= taken <= 540 * MiB, taken  # not 896 MiB
    assert all(
        r.graphs()["reason"] == "its context takes the shared activation scratch" for r in runners
    )


def test_a_model_larger_than_the_free_memory_is_refused_with_the_figures(provider):
    free, total = trt.device_memory_info()
    engine = {
        "plan_sha256": "x",
        "weight_bytes": total,
        "streamable_weights_size": 0,
        "device_memory_size": MiB,
    }
    method = {
        "name": "forward",
        "delegates": [{"index": 0, "backend": "TensorRTBackend", "details": {"engine": engine}}],
    }
    with pytest.raises(DeviceMemoryFull) as refused:
        admit("big", (method,), 2, TensorRTParameters())
    message = refused.value.message
    assert f"model 'big' needs {total + 2 * MiB} bytes of GPU memory" in message
    assert f"of the device's {total} bytes are free" in message
    reported_free = int(message.split(" but ")[1].split(" of the device")[0])
    assert abs(reported_free - free) < 64 * MiB
