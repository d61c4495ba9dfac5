"""The shipped TensorRT provider against a real TensorRT runtime on a CUDA device (the H200).

No TensorRT builder exists in this workplace, so no real plan can be made: these tests pin down
what can be checked without one -- the module and device are found, every API the provider calls
exists under the names it uses, and a bad plan is refused with TensorRT's own reason.
"""

import pytest

from service.backends.tensorrt import cuda_driver
from service.backends.tensorrt import runtime as tensorrt_runtime
from service.backends.tensorrt.runtime import TensorRTEngineProvider, TensorRTError

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def trt():
    return tensorrt_runtime.tensorrt_module()


def test_tensorrt_and_a_cuda_device_are_available():
    ok, reason = tensorrt_runtime.availability()
    assert ok, reason
    assert "CUDA device(s)" in reason
    assert cuda_driver.device_count() >= 1


def test_a_garbage_plan_is_refused_with_tensorrts_reason():
    with pytest.raises(TensorRTError) as raised:
        TensorRTEngineProvider().deserialize(b"not a TensorRT plan" * 8, 0)
    message = str(raised.value)
    assert "could not deserialize the plan (152 bytes) on CUDA device 0" in message
    assert "Serialization assertion header.magicTag == kEXPECTED_MAGIC_TAG failed" in message


def test_a_device_that_does_not_exist_is_refused_before_tensorrt_runs():
    missing = cuda_driver.device_count()
    with pytest.raises(TensorRTError, match=f"CUDA device {missing} does not exist"):
        TensorRTEngineProvider().deserialize(b"ftrt", missing)


def test_device_selection_restores_the_callers_context():
    driver = cuda_driver.cuda_driver()
    with driver.current(0):
        with driver.current(0):
            pass
    # A second garbage plan still gets a reason of its own: the log capture was reset.
    with pytest.raises(TensorRTError, match="magicTag"):
        TensorRTEngineProvider().deserialize(bytes(64), 0)


def test_the_engine_stats_and_serialization_flags_resolve(trt):
    assert int(trt.EngineStat.STRIPPED_WEIGHTS_SIZE) != int(trt.EngineStat.TOTAL_WEIGHTS_SIZE)
    for flag in ("EXCLUDE_WEIGHTS", "EXCLUDE_LEAN_RUNTIME", "INCLUDE_REFIT"):
        assert hasattr(trt.SerializationFlag, flag)


@pytest.mark.parametrize(
    "cls, names",
    [
        (
            "ICudaEngine",
            [
                "num_io_tensors",
                "get_tensor_name",
                "get_tensor_mode",
                "get_tensor_dtype",
                "get_tensor_shape",
                "get_tensor_location",
                "get_tensor_profile_shape",
                "is_shape_inference_io",
                "get_engine_stat",
                "refittable",
                "create_execution_context",
                "streamable_weights_size",
                "weight_streaming_budget_v2",
            ],
        ),
        (
            "IExecutionContext",
            [
                "set_input_shape",
                "get_tensor_shape",
                "set_tensor_address",
                "execute_async_v3",
                "set_device_memory",
            ],
        ),
        ("ExecutionContextAllocationStrategy", ["USER_MANAGED"]),
        ("Runtime", ["deserialize_cuda_engine"]),
    ],
)
def test_every_call_the_provider_makes_exists(trt, cls, names):
    missing = [name for name in names if not hasattr(getattr(trt, cls), name)]
    assert not missing, f"{trt.__name__}.{cls} lacks {missing}"


def test_device_memory_size_is_readable_under_one_of_its_names(trt):
    assert any(
        hasattr(trt.ICudaEngine, name) for name in ("device_memory_size_v2", "device_memory_size")
    )


def test_the_dtypes_and_io_modes_the_provider_reads_exist(trt):
    for member in tensorrt_runtime._DTYPE_NAMES:
        assert hasattr(trt.DataType, member), member
    assert hasattr(trt.TensorIOMode, "INPUT")
    assert trt.TensorLocation.DEVICE.name == "DEVICE"


def test_the_ingest_check_refuses_a_garbage_engine_with_tensorrts_reason(tmp_path):
    # The whole ingest path on real TensorRT: the backend's blob parser, then this provider.
    import ethost_tensorrt

    from service.backends.tensorrt.checks import check_tensorrt_delegate, verify_engine
    from service.config import Settings
    from service.ingest.delegates import IngestContext
    from service.ingest.inspection import DelegateInfo, MethodInfo, ProgramInfo
    from support import trt_blob

    ethost_tensorrt.set_engine_provider(None)
    blob = trt_blob.make_blob(
        trt_blob.metadata([("x", True), ("output0", False)]), b"garbage!" * 32
    )
    program = tmp_path / "model.pte"  # the blob stands for the whole program file
    program.write_bytes(blob)
    delegate = DelegateInfo("forward", 0, "TensorRTBackend", blob, 0, [])
    method = MethodInfo("forward", [], [], {}, [delegate], [])
    context = IngestContext(Settings(), "model.pte", ProgramInfo([method]), program, {})
    report = check_tensorrt_delegate(delegate, context)
    assert report.details["verified"] is True
    # What the isolated check child does with the check's work (the server never does it).
    report.isolated.finish(verify_engine(report.isolated.request))
    assert [p.rule for p in report.problems] == ["tensorrt.plan_invalid"]
    assert "TensorRT could not deserialize the plan (256 bytes)" in report.problems[0].message
