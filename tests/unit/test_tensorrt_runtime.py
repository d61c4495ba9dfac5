"""What of service.backends.tensorrt.runtime can be checked on a host without TensorRT or a GPU
(CI).

The TensorRT calls themselves are exercised on the H200 by tests/gpu/test_tensorrt_provider.py.
"""

import enum
import json
import os
import subprocess
import sys
import textwrap

import pytest

from service.backends.tensorrt import cuda_driver
from service.backends.tensorrt import runtime as tensorrt_runtime
from service.backends.tensorrt.runtime import (
    MODULE_CANDIDATES,
    TensorRTEngineProvider,
    TensorRTError,
    availability,
    import_first,
)


def test_full_tensorrt_is_preferred_and_the_lean_bindings_are_the_last_resort():
    assert MODULE_CANDIDATES[0] == "tensorrt"
    assert MODULE_CANDIDATES[-1] == "tensorrt_lean_bindings"


def test_import_first_takes_the_first_module_that_imports():
    module, reasons = import_first(("etrt_test_absent_module", "json", "textwrap"))
    assert module is json
    assert reasons == ["etrt_test_absent_module: not installed"]


def test_import_first_reports_every_candidate_when_none_imports():
    module, reasons = import_first(("etrt_test_absent_a", "etrt_test_absent_b"))
    assert module is None
    assert reasons == ["etrt_test_absent_a: not installed", "etrt_test_absent_b: not installed"]


def _write_package(root, name, body):
    package = root / name
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(body))


def test_a_module_that_is_installed_but_broken_is_reported_with_its_own_error(
    tmp_path, monkeypatch
):
    # What the lean bindings do when their libs wheel is missing: the package exists, its
    # native library does not load.
    _write_package(
        tmp_path,
        "etrt_test_broken_bindings",
        'raise ImportError("libnvinfer_lean.so.11: cannot open shared object file")',
    )
    _write_package(tmp_path, "etrt_test_missing_dependency", "import etrt_test_absent_libs")
    monkeypatch.syspath_prepend(str(tmp_path))
    module, reasons = import_first(
        ("etrt_test_broken_bindings", "etrt_test_missing_dependency", "json")
    )
    assert module is json
    assert reasons[0] == (
        "etrt_test_broken_bindings: libnvinfer_lean.so.11: cannot open shared object file"
    )
    assert "not installed" not in reasons[1]
    assert "etrt_test_absent_libs" in reasons[1]


def test_availability_on_this_host_names_what_is_missing():
    ok, reason = availability()
    assert not ok
    assert reason.startswith("no TensorRT runtime module (")
    for name in MODULE_CANDIDATES:
        assert f"{name}: not installed" in reason


def test_no_cuda_driver_means_no_devices_with_a_reason():
    driver = cuda_driver.CudaDriver()
    assert "libcuda.so.1" in driver.reason
    assert driver.device_count() == 0
    assert cuda_driver.device_count() == 0
    with pytest.raises(TensorRTError, match="libcuda.so.1"):
        with driver.current(0):
            pass


def test_provider_without_a_device_refuses_before_touching_tensorrt():
    # A TensorRT Runtime made without a usable device crashes the process when used, so the
    # device must be found first.
    with pytest.raises(TensorRTError, match="no CUDA driver"):
        TensorRTEngineProvider().deserialize(b"ftrt" + bytes(60), 0)


def test_without_tensorrt_the_module_lookup_raises_the_availability_reason():
    with pytest.raises(TensorRTError, match="no TensorRT runtime module"):
        tensorrt_runtime.tensorrt_module()


@pytest.mark.parametrize("address", [0x1010, 0x1080, 0x10FF, 1])
def test_an_unaligned_address_is_refused_before_tensorrt_sees_it(address):
    # The execution context is None: the address check must come before any TensorRT call.
    ctx = tensorrt_runtime.Context(None, None, inputs=("x",), outputs=(), names=("x",))
    with pytest.raises(TensorRTError, match="not a multiple of 256"):
        TensorRTEngineProvider().execute(ctx, None, (address,), 0)
    assert ctx.bound == [None]


class _RecordingContext:
    """Stands in for a TensorRT IExecutionContext: records the calls the provider makes."""

    def __init__(self):
        self.calls = []

    def set_input_shape(self, name, shape):
        self.calls.append(("shape", name, shape))
        return True

    def get_tensor_shape(self, name):
        return (2, 4)

    def set_tensor_address(self, name, address):
        self.calls.append(("address", name, address))
        return True

    def execute_async_v3(self, stream):
        self.calls.append(("enqueue", stream))
        return True


def test_execute_binds_only_addresses_that_moved_and_enqueues_once():
    trt_ctx = _RecordingContext()
    ctx = tensorrt_runtime.Context(
        trt_ctx, None, inputs=("a", "b"), outputs=("out",), names=("a", "b", "out")
    )
    provider = TensorRTEngineProvider()
    assert provider.infer_shapes(ctx, [[2, 4], [2, 4]]) == [[2, 4]]
    provider.execute(ctx, None, (0x1000, 0x2000, 0x3000), 7)
    provider.execute(ctx, None, None, 7)
    provider.execute(ctx, [[1, 4], [1, 4]], (0x1000, 0x2100, 0x3000), 8)
    assert trt_ctx.calls == [
        ("shape", "a", (2, 4)),
        ("shape", "b", (2, 4)),
        ("address", "a", 0x1000),
        ("address", "b", 0x2000),
        ("address", "out", 0x3000),
        ("enqueue", 7),
        ("enqueue", 7),
        ("shape", "a", (1, 4)),
        ("shape", "b", (1, 4)),
        ("address", "b", 0x2100),
        ("enqueue", 8),
    ]


def test_a_data_dependent_output_shape_is_refused():
    trt_ctx = _RecordingContext()
    trt_ctx.get_tensor_shape = lambda name: (-1, 4)
    ctx = tensorrt_runtime.Context(
        trt_ctx, None, inputs=("a",), outputs=("out",), names=("a", "out")
    )
    with pytest.raises(TensorRTError, match="data-dependent output shapes are not supported"):
        TensorRTEngineProvider().infer_shapes(ctx, [[2, 4]])


# Stands in for TensorRT's DataType enum: only member names are read.
DataType = enum.Enum("DataType", "FLOAT HALF BF16 INT8 INT32 INT64 BOOL UINT8 FP8 INT4 FP4 E8M0")


@pytest.mark.parametrize(
    "member, expected",
    [
        ("FLOAT", "float32"),
        ("HALF", "float16"),
        ("BF16", "bfloat16"),
        ("INT8", "int8"),
        ("INT32", "int32"),
        ("INT64", "int64"),
        ("BOOL", "bool"),
        ("UINT8", "uint8"),
        ("FP8", "float8_e4m3fn"),
    ],
)
def test_engine_dtypes_map_to_numpy_names(member, expected):
    assert tensorrt_runtime._dtype_name(DataType[member], "x") == expected


@pytest.mark.parametrize("member", ["INT4", "FP4", "E8M0"])
def test_engine_dtypes_without_an_executorch_type_are_refused(member):
    with pytest.raises(TensorRTError, match=f"tensor 'x' has TensorRT dtype {member}"):
        tensorrt_runtime._dtype_name(DataType[member], "x")


def test_install_backend_registers_the_backend_and_the_shipped_provider():
    # In a child: a backend library loaded into the native host stays for the process's life.
    script = textwrap.dedent("""
        import ethost, ethost_tensorrt
        from service.backends.tensorrt.runtime import TensorRTEngineProvider, install_backend
        install_backend()
        assert "TensorRTBackend" in ethost.registered_backends(), ethost.registered_backends()
        assert isinstance(ethost_tensorrt.engine_provider(), TensorRTEngineProvider)
        print("installed")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "installed"
