"""Issue 31, item 1, on the H200: a real poisoned CUDA context contained, while another model
serves. The test engine provider on CUDA memory (support.test_backend_setup:
install_test_backend_on_cuda) launches, for every execute of the "bad" model, a kernel that
writes through an invalid address (cudaErrorIllegalAddress) or a misaligned one
(cudaErrorMisalignedAddress) on the execute's stream: the delegate's stream synchronize meets the
error, and the device synchronize the engine then asks for fails too. The "good" model computes
its adds with a CUDA kernel (test_cuda_kernel), so its right answers after each restart show the
new engine's context runs kernels.

The scenario and its checks are the CPU e2e test's (support/gpu_fault_cases.py): the faulting
request 503 with Retry-After naming model and input, readiness false within 1 s (HTTP, gRPC),
the good model answering again within 10 s with nothing but 200/503 meanwhile, faults and
restarts counted across restarts, quarantine after K (the default 3 for the illegal address; 1
for the misaligned one, to keep the run short) lifted by a load, no front restarted.

Programs: exported beforehand into $ETHOST_TRT_PROGRAMS (`cd tests && python -m
support.trt_programs DIR`: mixed_256_<name>.pte for each of trt_models.FAULT_SET), since
executorch.exir does not import on the GPU machine.
"""

import os

import numpy as np
import pytest

from support.gpu_fault_cases import contain
from support.server import ServerProcess, upload
from support.trt_models import FAULT_SET, MODELS, fault_program

pytestmark = pytest.mark.gpu
BACKEND = "support.test_backend_setup:install_test_backend_on_cuda"


@pytest.fixture(scope="module")
def programs():
    where = os.environ.get("ETHOST_TRT_PROGRAMS")
    assert where, "set ETHOST_TRT_PROGRAMS (see this module's docstring)"
    found = {name: fault_program(where, name) for name in FAULT_SET}
    missing = [str(path) for path in found.values() if not path.exists()]
    assert not missing, f"ETHOST_TRT_PROGRAMS lacks {missing}"
    return found


@pytest.mark.parametrize(
    "bad, k, cuda_error",
    [("sticky_illegal", 3, "cudaErrorIllegalAddress"), ("sticky_misaligned", 1, "Misaligned")],
)
def test_a_real_poisoned_context_is_contained(tmp_path, programs, bad, k, cuda_error):
    server = ServerProcess(
        tmp_path / "artifacts",
        "--backend-setup",
        BACKEND,
        "--gpu-fault-quarantine-count",
        str(k),
    ).start()
    try:
        with server.client() as client:
            assert upload(client, "good", programs["kernel"]).status_code == 201
            assert upload(client, "bad", programs[bad]).status_code == 201
        shapes, reference = MODELS["mixed"]
        rng = np.random.default_rng(0)
        inputs = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
        measured = contain(server, inputs, reference(*inputs).reshape(-1), k)
        print(f"{bad}: {measured}")
        assert max(measured.ready_false_s) < 1.0
        assert max(measured.serving_again_s) <= 10.0
        log = server.log_path.read_text(errors="replace")
        assert cuda_error in log, log[-4000:]
    finally:
        server.stop()
