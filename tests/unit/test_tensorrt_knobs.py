"""The TensorRT delegate's knobs: parsed from Triton `parameters`, passed to the delegate at load
(over what the program baked in), and the device needs GPU memory admission adds up.

The delegate side runs the real runner (ethost_tensorrt.testing.Runner) on the test engine
provider and a host-memory stand-in GPU; CUDA-graph capture itself needs a GPU
(tests/gpu/test_tensorrt_knobs_cuda.py).
"""

import numpy as np
import pytest

from service.backends.tensorrt.loading import DeviceNeed, admit, device_need
from service.errors import DeviceMemoryFull
from service.model_config.parameters import TensorRTParameters
from service.model_config.parse import parse_model_config, stored_config
from support.test_engine_provider import TestEngineProvider
from support.trt_blob import io, plan_blob
from support.trt_host import load_tensorrt_backend

trt = load_tensorrt_backend()
MiB = 1 << 20
STREAMING = {"total_weights_size": 8 * MiB, "streamable_weights_size": 6 * MiB}


def parameters(**values):
    return {"parameters": {k: {"string_value": v} for k, v in values.items()}}


@pytest.mark.parametrize(
    "given, expected",
    [
        ({"weight_streaming_budget": "1073741824"}, TensorRTParameters(budget_bytes=1 << 30)),
        ({"weight_streaming_budget": "0"}, TensorRTParameters(budget_bytes=0)),
        ({"weight_streaming_budget": "0.25"}, TensorRTParameters(budget_fraction=0.25)),
        ({"weight_streaming_budget": "1.0"}, TensorRTParameters(budget_fraction=1.0)),
        ({"use_cuda_graphs": "true"}, TensorRTParameters(use_cuda_graphs=True)),
        ({"use_shared_engines": "FALSE"}, TensorRTParameters(use_shared_engines=False)),
    ],
)
def test_parameters_parse_and_survive_the_stored_round_trip(given, expected):
    config, problems = parse_model_config(parameters(**given))
    assert problems == []
    assert config.parameters == expected
    assert stored_config(config.to_json()) == config


@pytest.mark.parametrize(
    "value",
    ["-1", "1.5", "0.5.1", "50%", "1e9", "", "0x10", "12345678901234567890"],
)
def test_a_budget_neither_bytes_nor_a_fraction_is_refused(value):
    _, problems = parse_model_config(parameters(weight_streaming_budget=value))
    assert [p.rule for p in problems] == ["config.parameter"]
    assert problems[0].file == "config"
    assert "parameters.weight_streaming_budget must be a byte count" in problems[0].message


def test_parameters_take_only_the_three_knobs_in_tritons_form():
    _, problems = parse_model_config(
        {
            "parameters": {
                "use_cuda_graph": {"string_value": "true"},
                "use_cuda_graphs": {"string_value": "on"},
                "use_shared_engines": True,
            }
        }
    )
    assert sorted(p.rule for p in problems) == [
        "config.parameter",
        "config.type",
        "config.unknown_key",
    ]


def test_defaults_share_engines_and_pass_nothing():
    assert TensorRTParameters().shared_engines
    assert TensorRTParameters().to_json() == {}
    assert set(TensorRTParameters().load_options().values()) == {None}


# --- the delegate at load --------------------------------------------------------------------


@pytest.fixture
def provider():
    trt.testing.use_host_memory(False, 64 * MiB)
    p = TestEngineProvider()
    trt.set_engine_provider(p)
    yield p
    trt.set_load_options()
    trt.set_engine_provider(None)


def blob(stats=None):
    made, _ = plan_blob("scale", [io("a", True, [4]), io("o", False, [4])], stats=stats or {})
    return made


def run_scale(runner):
    x = np.arange(4, dtype=np.float32)
    a = trt.testing.device_alloc(16)
    o = trt.testing.device_alloc(16)
    try:
        trt.testing.device_write(a, x.tobytes())
        runner.run([(a, 16, [4], "float32"), (o, 16, [4], "float32")])
        return np.frombuffer(trt.testing.device_read(o, 16), np.float32)
    finally:
        trt.testing.device_free(a)
        trt.testing.device_free(o)


def test_a_budget_in_bytes_reaches_the_engine_before_its_context(provider):
    trt.set_load_options(weight_streaming_budget_bytes=2 * MiB)
    runner = trt.testing.Runner(blob(STREAMING))
    assert provider.budgets == [2 * MiB]
    stats = runner.engine_stats
    assert stats["weight_streaming_budget"] == 2 * MiB
    assert stats["streamable_weights_size"] == 6 * MiB
    np.testing.assert_array_equal(run_scale(runner), np.arange(4) * 2)


def test_a_fraction_is_of_the_streamable_weights_and_a_budget_above_them_is_clamped(provider):
    trt.set_load_options(weight_streaming_budget_fraction=0.5)
    trt.testing.Runner(blob(STREAMING))
    trt.set_load_options(weight_streaming_budget_bytes=100 * MiB)
    trt.testing.Runner(blob(STREAMING))
    assert provider.budgets == [3 * MiB, 6 * MiB]


def test_an_engine_with_nothing_streamable_gets_no_budget(provider):
    trt.set_load_options(weight_streaming_budget_bytes=MiB)
    stats = trt.testing.Runner(blob({"total_weights_size": MiB})).engine_stats
    assert provider.budgets == []
    assert stats["weight_streaming_budget"] == -1


def test_shared_engines_deserialize_identical_plans_once_and_only_while_held(provider):
    first = trt.testing.Runner(blob())
    second = trt.testing.Runner(blob())
    assert provider.deserialized == 1
    trt.set_load_options(use_shared_engines=False)
    private = trt.testing.Runner(blob())
    assert provider.deserialized == 2
    del first, second, private
    trt.set_load_options()
    trt.testing.Runner(blob())
    assert provider.deserialized == 3  # the last holder went: the engine went with it


def test_another_budget_is_another_engine(provider):
    trt.testing.Runner(blob(STREAMING))
    trt.set_load_options(weight_streaming_budget_bytes=MiB)
    trt.testing.Runner(blob(STREAMING))
    assert provider.deserialized == 2


def test_engine_weights_and_contexts_take_the_device_they_report(provider):
    free_before, total = trt.device_memory_info()
    assert total == 64 * MiB
    stats = {**STREAMING, "device_memory_size": MiB}
    trt.set_load_options(weight_streaming_budget_bytes=MiB)
    runners = [trt.testing.Runner(blob(stats)) for _ in range(2)]
    free_after, _ = trt.device_memory_info()
    # One shared engine: 2 MiB not streamable + a 1 MiB budget; one context per runner.
    assert free_before - free_after == 3 * MiB + 2 * MiB
    del runners


def test_cuda_graphs_report_why_they_do_not_replay(provider):
    assert trt.testing.Runner(blob()).graphs()["reason"] == "use_cuda_graphs is off"
    trt.set_load_options(use_cuda_graphs=True)
    runner = trt.testing.Runner(blob())
    run_scale(runner)
    graphs = runner.graphs()
    assert (graphs["requested"], graphs["replaying"], graphs["replays"]) == (True, False, 0)
    assert graphs["reason"] == "host memory has no CUDA graphs"


def test_the_shared_scratch_serves_every_context_grown_to_the_largest(provider):
    trt.set_load_options(use_shared_activation_scratch=True)
    before = trt.device_memory_info()[0]
    small = trt.testing.Runner(blob({"device_memory_size": MiB}))
    large, _ = plan_blob(
        "scale", [io("b", True, [4]), io("p", False, [4])], stats={"device_memory_size": 3 * MiB}
    )
    large = trt.testing.Runner(large)
    assert before - trt.device_memory_info()[0] == 0  # user-managed contexts hold nothing
    np.testing.assert_array_equal(run_scale(small), np.arange(4) * 2)
    assert trt.shared_scratch_bytes() >= MiB
    x = trt.testing.device_alloc(16)
    y = trt.testing.device_alloc(16)
    large.run([(x, 16, [4], "float32"), (y, 16, [4], "float32")])
    np.testing.assert_array_equal(run_scale(small), np.arange(4) * 2)
    assert trt.shared_scratch_bytes() == 3 * MiB  # grown to the largest, never shrunk
    # Each context is bound the buffer with the size it needs, again only when the buffer moved
    # (growing may reuse the address); the large one was bound the grown buffer.
    assert {size for _, size in provider.scratches} == {MiB, 3 * MiB}
    grown = provider.scratches[[size for _, size in provider.scratches].index(3 * MiB)][0]
    assert provider.scratches[-1][0] == grown
    assert all(
        r["shared_scratch"]
        for r in trt.engine_reports()
        if r["delegate"] in (small.label, large.label)
    )
    trt.testing.device_free(x)
    trt.testing.device_free(y)


# --- admission ---------------------------------------------------------------------------------


def method(*engines, planned=()):
    return {
        "name": "forward",
        "delegates": [
            {"index": i, "backend": "TensorRTBackend", "details": {"engine": e}}
            for i, e in enumerate(engines)
        ],
        "planned_buffers": list(planned),
    }


def engine(sha, weights=8 * MiB, streamable=0, context=MiB):
    return {
        "plan_sha256": sha,
        "weight_bytes": weights,
        "streamable_weights_size": streamable,
        "device_memory_size": context,
    }


def test_device_need_counts_weights_once_per_engine_and_contexts_per_instance():
    methods = (
        method(
            engine("a"),
            engine("a"),
            engine("b", weights=4 * MiB),
            planned=[{"size": MiB, "device": "cuda:0"}, {"size": 5 * MiB, "device": "cpu"}],
        ),
    )
    need = device_need(methods, 2, TensorRTParameters(), set())
    assert need == DeviceNeed(weights=12 * MiB, contexts=6 * MiB, planned=2 * MiB)
    private = device_need(methods, 2, TensorRTParameters(use_shared_engines=False), set())
    assert private.weights == 20 * MiB
    # An engine another model already holds costs no weights.
    assert device_need(methods, 2, TensorRTParameters(), {("a", "")}).weights == 4 * MiB


def test_with_the_shared_scratch_contexts_need_only_what_it_must_grow_by():
    methods = (method(engine("a", context=4 * MiB), engine("b", context=2 * MiB)),)
    params = TensorRTParameters()
    assert device_need(methods, 3, params, set(), scratch=MiB).contexts == 3 * MiB
    assert device_need(methods, 3, params, set(), scratch=8 * MiB).contexts == 0


def test_device_need_applies_the_budget_to_streamable_weights():
    methods = (method(engine("a", weights=10 * MiB, streamable=8 * MiB)),)
    fraction = TensorRTParameters(budget_fraction=0.25)
    assert device_need(methods, 1, fraction, set()).weights == 2 * MiB + 2 * MiB
    assert device_need(methods, 1, TensorRTParameters(budget_bytes=0), set()).weights == 2 * MiB
    assert device_need(methods, 1, TensorRTParameters(), set()).weights == 10 * MiB


def test_admission_refuses_naming_what_is_needed_and_free(provider):
    methods = (method(engine("z", weights=100 * MiB)),)
    with pytest.raises(DeviceMemoryFull) as refused:
        admit("big", methods, 1, TensorRTParameters())
    free, total = trt.device_memory_info()
    assert refused.value.message.startswith(
        f"model 'big' needs {101 * MiB} bytes of GPU memory ({100 * MiB} of engine weights, "
        f"{MiB} of execution contexts for 1 instance(s), 0 of device-planned buffers) but "
        f"{free} of the device's {total} bytes are free"
    )
    assert [p.rule for p in refused.value.problems] == ["load.device_memory"]
    admit("small", (method(engine("y", weights=MiB)),), 1, TensorRTParameters())
