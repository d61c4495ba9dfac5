"""Inputs in device memory through the native host on the H200: the shared cases of
support/device_input_cases.py on real CUDA memory (cudaMalloc'd inputs, the TensorRTBackend
delegate and the test engine provider): bound directly when the program does not plan them and
they sit on a 256-byte boundary, staged when 16 bytes off, copied device-to-device or to the
host into planned buffers otherwise.

Programs: exported beforehand into $ETHOST_TRT_PROGRAMS (`cd tests && python -m
support.trt_programs DIR`, which adds the CPU programs of export_cpu_programs), since
executorch.exir does not import on the GPU machine; exported here when that variable is unset.
"""

import os
from pathlib import Path

import pytest

from support.device_input_cases import DeviceInputCases
from support.trt_models import (
    CPU_PROGRAMS,
    DEVICE_PLANNED_SET,
    GPU_SET,
    UNPLANNED_INPUTS_SET,
    UNPLANNED_OUTPUTS_SET,
    TrtProgram,
)

pytestmark = pytest.mark.gpu

FLAVOURS = {
    "unplanned": (UNPLANNED_INPUTS_SET[0], {"planned_inputs": False}),
    "unplanned_outputs": (
        UNPLANNED_OUTPUTS_SET[0],
        {"planned_inputs": False, "planned_outputs": False},
    ),
    "device_planned": (DEVICE_PLANNED_SET[0], {"device_planned": True}),
    "host_planned": (next((m, a, e) for m, a, e in GPU_SET if a == 256), {}),
}


@pytest.fixture(scope="module")
def device_input_programs(programs_dir):
    where = os.environ.get("ETHOST_TRT_PROGRAMS")
    if where:
        found = {k: TrtProgram.at(where, *spec, **kw) for k, (spec, kw) in FLAVOURS.items()}
        missing = [str(p.pte) for p in found.values() if not p.exists()]
        assert not missing, f"ETHOST_TRT_PROGRAMS lacks {missing}"
        cpu = {k: Path(where) / f"{f}.pte" for k, f in CPU_PROGRAMS.items()}
        missing = [str(p) for p in cpu.values() if not p.exists()]
        assert not missing, f"ETHOST_TRT_PROGRAMS lacks {missing}"
        return {**found, **cpu}
    from support.trt_programs import export_cpu_programs, export_trt_program

    found = {k: export_trt_program(programs_dir, *spec, **kw) for k, (spec, kw) in FLAVOURS.items()}
    return {**found, **export_cpu_programs(programs_dir)}


class TestDeviceInputsCudaMemory(DeviceInputCases):
    memory_kind = "cuda"
