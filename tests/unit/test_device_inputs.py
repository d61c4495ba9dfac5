"""Inputs in device memory through the native host, with the host-memory stand-in for the GPU
(tests/gpu/test_device_inputs_cuda.py reruns the shared cases on the H200): bound as they are
where the program leaves them out of memory planning, so the TensorRT delegate binds or stages
them, and copied into planned buffers otherwise; plus what the host refuses."""

import ethost
import numpy as np
import pytest

from service.shm.device_array import DeviceArray
from support.device_input_cases import DeviceInputCases
from support.device_planned_cases import SelectedMemory, load
from support.trt_models import (
    DEVICE_PLANNED_SET,
    GPU_SET,
    UNPLANNED_INPUTS_SET,
    UNPLANNED_OUTPUTS_SET,
)


@pytest.fixture(scope="module")
def device_input_programs(programs_dir):
    from support.programs import export_linear_relu
    from support.trt_programs import export_trt_program

    host_planned = next(spec for spec in GPU_SET if spec[1] == 256)
    return {
        "unplanned": export_trt_program(
            programs_dir, *UNPLANNED_INPUTS_SET[0], planned_inputs=False
        ),
        "unplanned_outputs": export_trt_program(
            programs_dir, *UNPLANNED_OUTPUTS_SET[0], planned_inputs=False, planned_outputs=False
        ),
        "device_planned": export_trt_program(
            programs_dir, *DEVICE_PLANNED_SET[0], device_planned=True
        ),
        "host_planned": export_trt_program(programs_dir, *host_planned),
        "cpu_unplanned": export_linear_relu(programs_dir, alignment=256, planned_inputs=False).pte,
        "cpu_unplanned_io": export_linear_relu(
            programs_dir, alignment=256, planned_inputs=False, planned_outputs=False
        ).pte,
    }


class TestDeviceInputsHostMemory(DeviceInputCases):
    memory_kind = "host"


class Described:
    """An object carrying only a __cuda_array_interface__ (what the host reads)."""

    def __init__(self, **interface):
        self.__cuda_array_interface__ = interface


class TestMalformedDescriptions(SelectedMemory):
    memory_kind = "host"

    @pytest.mark.parametrize(
        "interface, words",
        [
            ({"shape": (3, 5), "typestr": "<f4"}, "lacks shape, typestr or data"),
            ({"shape": (3, 5), "typestr": "<c8", "data": (256, False)}, "typestr '<c8'"),
            ({"shape": (3, 5), "typestr": "<f4", "data": (0, False)}, "null data address"),
            (
                {"shape": (3, 5), "typestr": "<f4", "data": (256, False), "strides": (4, 12)},
                "only C-contiguous",
            ),
            ({"shape": (3, 5), "typestr": "<i4", "data": (256, False)}, "expected dtype float32"),
        ],
    )
    def test_are_refused_naming_the_input(self, device_input_programs, interface, words):
        method = load(device_input_programs["unplanned"])
        x = np.zeros((3, 5), np.float32)
        with pytest.raises(ethost.InputError) as e:
            method.execute([x, Described(**interface)])
        assert e.value.index == 1 and words in str(e.value)


def test_device_array_reads_back_through_numpy_and_reports_the_copy(monkeypatch):
    """What dynamic batching's np.concatenate does with a device input: one counted copy."""
    source = np.arange(6, dtype=np.float32).reshape(2, 3)
    copied = []

    def fake_copy(dst, src, nbytes, device_id):
        assert (src, nbytes, device_id) == (source.ctypes.data, 24, 0)
        np.ctypeslib.as_array((np.ctypeslib.ctypes.c_char * nbytes).from_address(dst))[:] = (
            np.frombuffer(source.tobytes(), "S1")
        )

    monkeypatch.setattr("service.shm.device_array.cuda.copy", fake_copy)
    array = DeviceArray(
        source.ctypes.data, (2, 3), np.dtype(np.float32), 0, lambda: copied.append(1)
    )
    assert array.nbytes == 24 and array.ndim == 2
    np.testing.assert_array_equal(np.concatenate([array, array]), np.concatenate([source, source]))
    assert copied == [1, 1]
