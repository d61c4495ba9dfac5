"""Inputs in device memory through the native host on the H200: the shared cases of
support/device_input_cases.py on real CUDA memory (cudaMalloc'd inputs, the TensorRTBackend
delegate and the test engine provider): bound directly when the program does not plan them and
they sit on a 256-byte boundary, staged when 16 bytes off, copied device-to-device or to the
host into planned buffers otherwise.

Programs: exported beforehand into $ETHOST_TRT_PROGRAMS (`cd tests && python -m
support.trt_programs DIR`, plus linear_relu_align256_unplanned.pte from
support.programs.export_linear_relu), since executorch.exir does not import on the GPU machine;
exported here when that variable is unset.
"""

import os
from pathlib import Path

import pytest

from support.device_input_cases import DeviceInputCases
from support.trt_models import DEVICE_PLANNED_SET, GPU_SET, UNPLANNED_INPUTS_SET, TrtProgram

pytestmark = pytest.mark.gpu

FLAVOURS = {
    "unplanned": (UNPLANNED_INPUTS_SET[0], {"planned_inputs": False}),
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
        cpu = Path(where) / "linear_relu_align256_unplanned.pte"
        assert cpu.exists(), f"ETHOST_TRT_PROGRAMS lacks {cpu}"
        return {**found, "cpu_unplanned": cpu}
    from support.programs import export_linear_relu
    from support.trt_programs import export_trt_program

    found = {k: export_trt_program(programs_dir, *spec, **kw) for k, (spec, kw) in FLAVOURS.items()}
    cpu = export_linear_relu(programs_dir, alignment=256, planned_inputs=False).pte
    return {**found, "cpu_unplanned": cpu}


class TestDeviceInputsCudaMemory(DeviceInputCases):
    memory_kind = "cuda"
