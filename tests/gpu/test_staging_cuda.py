"""The staging cases again on real CUDA memory (H200), through the real backend code and the
test engine provider, plus TensorRTBackend programs run end to end by the native host.

Programs: exported beforehand on a machine with executorch.exir into $ETHOST_TRT_PROGRAMS
(`cd tests && python -m support.trt_programs DIR`), since executorch.exir does not import on the
GPU machine; exported here when that variable is unset.
"""

import os

import ethost
import numpy as np
import pytest

from support.staging_cases import StagingCases
from support.test_engine_provider import TestEngineProvider
from support.trt_host import labels, load_tensorrt_backend, new_delegate_counters
from support.trt_models import GPU_SET, TrtProgram

pytestmark = pytest.mark.gpu
trt = load_tensorrt_backend()


class TestStagingCudaMemory(StagingCases):
    memory_kind = "cuda"


@pytest.fixture(scope="module")
def programs(programs_dir):
    where = os.environ.get("ETHOST_TRT_PROGRAMS")
    if where:
        found = {spec: TrtProgram.at(where, *spec) for spec in GPU_SET}
        missing = [str(p.pte) for p in found.values() if not p.exists()]
        assert not missing, f"ETHOST_TRT_PROGRAMS lacks {missing}"
        return found
    from support.trt_programs import export_trt_program

    return {spec: export_trt_program(programs_dir, *spec) for spec in GPU_SET}


@pytest.fixture
def cuda_provider():
    trt.testing.use_cuda_memory()
    assert trt.memory_kind() == "cuda"
    p = TestEngineProvider()
    trt.set_engine_provider(p)
    yield p
    trt.set_engine_provider(None)


@pytest.mark.parametrize("spec", GPU_SET, ids=lambda s: f"{s[0]}-a{s[1]}{'-ptd' if s[2] else ''}")
def test_pte_end_to_end_on_cuda(programs, cuda_provider, spec):
    program = programs[spec]
    before = labels(trt)
    method = ethost.Program(str(program.pte), [str(p) for p in program.data_files]).load_method(
        "forward"
    )
    for seed in range(3):
        inputs = program.example_inputs(seed)
        outputs = method.execute(inputs)
        np.testing.assert_allclose(outputs[0], program.reference(*inputs)[0], rtol=1e-5, atol=1e-5)
    assert not cuda_provider.misaligned
    # host arenas on a discrete GPU: each binding staged once per call
    counters = new_delegate_counters(trt, before)
    assert counters and all(b["staging_copies"] == 3 for d in counters for b in d["bindings"])
