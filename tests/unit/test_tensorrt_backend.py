"""TensorRTBackend inside real .pte programs run by the native host (ethost), with the test
engine provider standing in for TensorRT and host memory standing in for the GPU."""

import shutil
import subprocess
import sys
import textwrap

import ethost
import numpy as np
import pytest

from support.test_engine_provider import TestEngineProvider
from support.trt_blob import io, make_blob, metadata, plan_blob
from support.trt_host import labels, load_tensorrt_backend, new_delegate_counters

trt = load_tensorrt_backend()


@pytest.fixture
def provider():
    trt.testing.use_host_memory(reads_pageable_host=False)
    p = TestEngineProvider()
    trt.set_engine_provider(p)
    yield p
    trt.set_engine_provider(None)


@pytest.fixture(scope="module")
def programs(programs_dir):
    from support.trt_programs import export_trt_program

    return {
        "mixed16": export_trt_program(programs_dir, "mixed", 16),
        "mixed256": export_trt_program(programs_dir, "mixed", 256),
        "ext": export_trt_program(programs_dir, "add", 16, external=True),
        "matmul": export_trt_program(programs_dir, "matmul", 16),
        "matmul_ext": export_trt_program(programs_dir, "matmul", 16, external=True),
    }


def run(program, data_files=None, seed=0):
    method = ethost.Program(
        str(program.pte),
        [str(p) for p in (program.data_files if data_files is None else data_files)],
    ).load_method("forward")
    inputs = program.example_inputs(seed)
    outputs = method.execute(inputs)
    for got, want in zip(outputs, program.reference(*inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    return method


def test_registered_once_in_the_host_registry():
    assert trt.registration_error() is None
    assert ethost.registered_backends().count("TensorRTBackend") == 1


def test_program_mixing_delegates_and_cpu_ops_runs_end_to_end(provider, programs):
    before = labels(trt)
    method = run(programs["mixed16"])
    meta = method.meta
    assert meta["delegates"] == ["TensorRTBackend", "TensorRTBackend"]
    mine = new_delegate_counters(trt, before)
    assert len(mine) == 2
    # host arenas on a (simulated) discrete GPU: every binding is staged, once per call
    assert all(b["staging_copies"] == 1 for d in mine for b in d["bindings"])
    # both delegates carry the same plan: deserialized once, shared
    assert not provider.misaligned and provider.deserialized == 1
    run(programs["matmul"])


def test_engine_in_ptd_by_engine_key(provider, programs):
    run(programs["ext"])


def test_missing_ptd_is_invalid_external_data(provider, programs):
    with pytest.raises(ethost.ExecuTorchError) as e:
        run(programs["ext"], data_files=[])
    assert e.value.error_name == "InvalidExternalData"


def test_ptd_without_the_engine_key_is_invalid_external_data(provider, programs):
    with pytest.raises(ethost.ExecuTorchError) as e:
        run(programs["ext"], data_files=programs["matmul_ext"].data_files)
    assert e.value.error_name == "InvalidExternalData"


@pytest.mark.parametrize("alignment, copies", [(16, True), (256, False)])
def test_planning_alignment_decides_staging_where_host_memory_is_readable(
    programs, alignment, copies
):
    trt.testing.use_host_memory(reads_pageable_host=True)
    p = TestEngineProvider()
    trt.set_engine_provider(p)
    try:
        before = labels(trt)
        method = run(programs[f"mixed{alignment}"])
        assert all(a % 256 == 0 for a in method.arena_addresses())
        total = sum(
            b["staging_copies"] for d in new_delegate_counters(trt, before) for b in d["bindings"]
        )
        assert (total > 0) == copies
        assert not p.misaligned
    finally:
        trt.set_engine_provider(None)
        trt.testing.use_host_memory()


def test_no_engine_provider_fails_the_load(programs):
    trt.testing.use_host_memory()
    trt.set_engine_provider(None)
    with pytest.raises(ethost.ExecuTorchError) as e:
        run(programs["mixed16"])
    assert e.value.error_name == "InvalidState"


def test_garbage_plan_refused_with_the_providers_reason(provider):
    blob = make_blob(metadata([("a", True), ("o", False)]), b"ftrt-not-a-plan")
    with pytest.raises(RuntimeError, match="DelegateInvalidCompatibility .*not a test plan"):
        trt.testing.Runner(blob)


def test_engine_stats_come_from_the_provider(provider):
    stats = {
        "stripped_weights_size": 10,
        "total_weights_size": 100,
        "refittable": True,
        "device_memory_size": 4096,
    }
    blob, _ = plan_blob("scale", [io("a", True, [4]), io("o", False, [4])], stats=stats)
    # Nothing streams: no streamable weights, so no budget either.
    assert trt.testing.Runner(blob).engine_stats == {
        **stats,
        "streamable_weights_size": 0,
        "weight_streaming_budget": -1,
    }


def test_engine_key_resolved_from_named_data(provider):
    blob, plan = plan_blob(
        "scale", [io("a", True, [64]), io("o", False, [64])], external_key="k_trt_engine"
    )
    with pytest.raises(RuntimeError, match="InvalidExternalData .*without its .ptd"):
        trt.testing.Runner(blob)
    with pytest.raises(RuntimeError, match="InvalidExternalData .*no entry 'k_trt_engine'"):
        trt.testing.Runner(blob, {"other": plan})
    assert trt.testing.Runner(blob, {"k_trt_engine": plan}).engine_stats["total_weights_size"] == 0


def test_second_library_claiming_the_id_reports_it(tmp_path):
    """A second copy of the library (as another package shipping TensorRTBackend would be) cannot
    take the id; it says so, so the service can refuse to start instead of running the wrong one."""
    copy = tmp_path / "other_tensorrt_backend.so"
    shutil.copy(trt.__file__, copy)
    script = textwrap.dedent(f"""
        import ctypes, importlib.util, ethost
        print(ethost.load_backend_library(importlib.util.find_spec("ethost_tensorrt").origin))
        print(ethost.load_backend_library({str(copy)!r}))
        lib = ctypes.CDLL({str(copy)!r})
        lib.ethost_tensorrt_registration_error.restype = ctypes.c_char_p
        print(lib.ethost_tensorrt_registration_error().decode())
        import ethost_tensorrt
        print(ethost_tensorrt.registration_error())
    """)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "['TensorRTBackend']" and lines[1] == "[]"
    assert "already holds that backend id" in lines[2]
    assert lines[3] == "None"


def test_the_shipped_module_carries_no_test_hooks():
    """The hooks are a separate test-only module; without it `ethost_tensorrt.testing` says how
    to build it, and nothing of it is compiled into ethost_tensorrt itself."""
    script = textwrap.dedent("""
        import sys
        sys.modules["ethost_tensorrt_testing"] = None  # as if it were not installed
        import ethost_tensorrt
        assert not hasattr(ethost_tensorrt, "Runner")
        try:
            ethost_tensorrt.testing
        except AttributeError as e:
            print(e)
        try:
            from ethost_tensorrt import testing
        except ImportError as e:
            print(type(e).__name__)
    """)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert "test hooks (ethost_tensorrt_testing) are not installed" in lines[0]
    assert "ETHOST_TESTING=ON" in lines[0]
    assert lines[1] == "ImportError"
