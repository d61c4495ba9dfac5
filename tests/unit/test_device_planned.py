"""Programs whose planned buffers live in CUDA memory, run by the native host through the
host-memory stand-in for the GPU (tests/gpu/test_device_planned_cuda.py reruns the shared cases
on the H200), and refused where there is no device memory at all. Both flavours: device-planned
method inputs/outputs the host copies, and ExecuTorch's in-graph copy ops, which copy through
the CUDA DeviceAllocator the host registers over the same device-memory seam."""

import subprocess
import sys
import textwrap
from pathlib import Path

import ethost
import numpy as np
import pytest

from support.device_planned_cases import DevicePlannedCases, InGraphCopiesCases, T, load, trt
from support.test_engine_provider import TestEngineProvider
from support.trt_models import DEVICE_PLANNED_SET, IN_GRAPH_COPIES_SET


@pytest.fixture(scope="module")
def device_programs(programs_dir):
    from support.trt_programs import export_trt_program

    return {
        spec: export_trt_program(programs_dir, *spec, device_planned=True)
        for spec in DEVICE_PLANNED_SET
    }


@pytest.fixture(scope="module")
def copy_programs(programs_dir):
    from support.trt_programs import export_trt_program

    return {
        spec: export_trt_program(programs_dir, *spec, in_graph_copies=True)
        for spec in IN_GRAPH_COPIES_SET
    }


class TestDevicePlannedHostMemory(DevicePlannedCases):
    memory_kind = "host"


class TestInGraphCopiesHostMemory(InGraphCopiesCases):
    memory_kind = "host"

    def test_copies_follow_the_memory_selected_at_each_call(self, copy_programs):
        """The allocator is registered once per process but asks the seam for the selected
        memory at every copy: a method loaded after a new selection runs, while one loaded under
        the old selection now has its device buffer refused by the new memory, as an error."""
        program = copy_programs[IN_GRAPH_COPIES_SET[0]]
        inputs = program.example_inputs()
        first = load(program)
        np.testing.assert_allclose(
            first.execute(inputs)[0], program.reference(*inputs)[0], rtol=1e-5
        )
        T.use_host_memory(reads_pageable_host=False)
        trt.set_engine_provider(TestEngineProvider())
        second = load(program)
        np.testing.assert_allclose(
            second.execute(inputs)[0], program.reference(*inputs)[0], rtol=1e-5
        )
        with pytest.raises(ethost.ExecuTorchError) as refused:
            first.execute(inputs)
        # The copy kernel's own reason comes first, not only the runtime's last line about it.
        assert "_h2d_copy" in str(refused.value), str(refused.value)


@pytest.mark.parametrize("flavour", ["device-planned", "in-graph-copies"])
@pytest.mark.parametrize("with_backend", [False, True], ids=["host-alone", "with-tensorrt-backend"])
def test_refused_where_there_is_no_cuda_device(
    device_programs, copy_programs, flavour, with_backend
):
    """A fresh process on a host without CUDA, as the service's load check runs it: the host
    alone, and with the TensorRTBackend library loaded (whose selection it shares)."""
    programs, specs = (
        (device_programs, DEVICE_PLANNED_SET)
        if flavour == "device-planned"
        else (copy_programs, IN_GRAPH_COPIES_SET)
    )
    pte = str(programs[specs[0]].pte)
    script = textwrap.dedent(f"""
        import ethost
        if {with_backend}:
            from support.trt_host import load_tensorrt_backend
            status = load_tensorrt_backend().device_status()
            if status is None:
                print("CUDA")
                raise SystemExit(0)
        try:
            ethost.Program({pte!r}).load_method("forward")
            print("LOADED")
        except ethost.ExecuTorchError as e:
            print(e.error_name, e.path, sep="\\n")
            print(e)
    """)
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(Path(__file__).parents[1]),
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    if lines == ["CUDA"]:
        pytest.skip("this host has a CUDA device; the refusal needs one without")
    assert lines[:2] == ["NotSupported", pte], out.stdout
    assert "no CUDA device" in lines[2] and pte in lines[2]
