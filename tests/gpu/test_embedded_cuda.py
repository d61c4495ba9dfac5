"""The embedded engine on the H200 with device tensors: a PyTorch CUDA tensor
(__cuda_array_interface__) and a DLPack-only CUDA producer reach the TensorRT delegate at their
device addresses (bound, no copy by the engine or the host), as a CUDA shared memory input does;
a strided device tensor is refused naming the input.

The program is the TensorRT add with unplanned inputs ($ETHOST_TRT_PROGRAMS, served with the test
engine provider on CUDA memory): the delegate and the host's device input path are production
code, only the engine is a stand-in. ethost.device_input_counts() is this process's: the engine
runs here.
"""

from __future__ import annotations

import asyncio
import os

import ethost
import numpy as np
import pytest
import torch

from service.embedded import Engine
from service.errors import Invalid

pytestmark = pytest.mark.gpu
TRT_BACKEND = "support.test_backend_setup:install_test_backend_on_cuda"


@pytest.fixture(scope="module")
def add_program(programs_dir):
    from support.trt_models import UNPLANNED_INPUTS_SET, TrtProgram

    where = os.environ.get("ETHOST_TRT_PROGRAMS")
    if where:
        found = TrtProgram.at(where, *UNPLANNED_INPUTS_SET[0], planned_inputs=False)
        assert found.exists(), f"ETHOST_TRT_PROGRAMS lacks {found.pte}"
        return found
    from support.trt_programs import export_trt_program

    return export_trt_program(programs_dir, *UNPLANNED_INPUTS_SET[0], planned_inputs=False)


class OnlyDLPack:
    """A CUDA tensor seen through DLPack alone (no __cuda_array_interface__), as JAX offers."""

    def __init__(self, tensor):
        self._tensor = tensor

    def __dlpack__(self, **kwargs):
        return self._tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._tensor.__dlpack_device__()


def since(before: dict) -> dict:
    after = ethost.device_input_counts()
    return {key: after[key] - before[key] for key in after}


def test_device_tensors_reach_the_delegate_at_their_addresses(tmp_path, add_program):
    async def main():
        engine = await Engine.open(tmp_path / "store", backend_setup=(TRT_BACKEND,))
        async with engine:
            info = await engine.deploy("add", add_program.pte)
            method = info.methods["forward"]
            names, output = method.input_names(), method.output_names()[0]
            shape = tuple(method.inputs[0].shape)
            x = torch.randn(shape, device="cuda")
            y = torch.randn(shape, device="cuda")
            want = (x + y).cpu().numpy()
            for wrap in (lambda t: t, OnlyDLPack):
                before = ethost.device_input_counts()
                result = await engine.infer("add", {names[0]: wrap(x), names[1]: wrap(y)})
                np.testing.assert_allclose(result[output], want, rtol=1e-6)
                assert since(before) == {"bound": 2, "device_to_device": 0, "to_host": 0}
            strided = torch.randn(tuple(reversed(shape)), device="cuda").t()
            with pytest.raises(Invalid, match="contiguous"):
                await engine.infer("add", {names[0]: strided, names[1]: y})

    asyncio.run(main())
