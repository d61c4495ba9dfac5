"""Device-planned programs on the H200: the host allocates the planned CUDA buffers with
cudaMalloc, copies request inputs in and results out, and the TensorRTBackend delegate binds
the device tensors (the shared cases of support/device_planned_cases.py on real CUDA memory).
In-graph-copy programs: ExecuTorch's et_copy ops copy host tensors to and from the planned CUDA
buffer through the CUDA DeviceAllocator the host registers over cudart.

Programs: exported beforehand into $ETHOST_TRT_PROGRAMS (`cd tests && python -m
support.trt_programs DIR`), since executorch.exir does not import on the GPU machine; exported
here when that variable is unset.
"""

import os

import pytest

from support.device_planned_cases import DevicePlannedCases, InGraphCopiesCases
from support.trt_models import DEVICE_PLANNED_SET, IN_GRAPH_COPIES_SET, TrtProgram

pytestmark = pytest.mark.gpu


def _programs(programs_dir, specs, **flavour):
    where = os.environ.get("ETHOST_TRT_PROGRAMS")
    if where:
        found = {spec: TrtProgram.at(where, *spec, **flavour) for spec in specs}
        missing = [str(p.pte) for p in found.values() if not p.exists()]
        assert not missing, f"ETHOST_TRT_PROGRAMS lacks {missing}"
        return found
    from support.trt_programs import export_trt_program

    return {spec: export_trt_program(programs_dir, *spec, **flavour) for spec in specs}


@pytest.fixture(scope="module")
def device_programs(programs_dir):
    return _programs(programs_dir, DEVICE_PLANNED_SET, device_planned=True)


@pytest.fixture(scope="module")
def copy_programs(programs_dir):
    return _programs(programs_dir, IN_GRAPH_COPIES_SET, in_graph_copies=True)


class TestDevicePlannedCudaMemory(DevicePlannedCases):
    memory_kind = "cuda"


class TestInGraphCopiesCudaMemory(InGraphCopiesCases):
    memory_kind = "cuda"
