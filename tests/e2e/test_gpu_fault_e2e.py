"""Issue 31, item 1, on CPU: a model whose executes poison the device context (the test engine
provider puts the host-memory stand-in in the sticky state a CUDA illegal address leaves, so the
service meets it through the same seam as on a GPU: the delegate's stream synchronize fails and
ethost.device_fault() says the context is poisoned) while another model serves.

Checked: the faulting request is a 503 with Retry-After naming the model and its input;
readiness is false within 1 s on HTTP and gRPC; the engine restarts and the other model answers
again within 10 s, with nothing but 200 and 503 meanwhile; the faults and restarts are counted
across engine restarts; after K faults the model is quarantined (described as such, the others
serve) and a load lifts it; no front restarted. Both execute paths classify the same way: the
engine's native lane, and the engine's Python (with --access-log the lane takes no route).
"""

import pytest

from support.gpu_fault_cases import contain
from support.server import ServerProcess, upload
from support.trt_program_fixtures import mixed_16  # noqa: F401

TEST_BACKEND = "support.test_backend_setup:install_test_backend"
K = 2  # faults to quarantine, as --gpu-fault-quarantine-count (3 by default: 2 keeps it short)


@pytest.fixture(scope="module")
def sticky(mixed_16, tmp_path_factory):  # noqa: F811
    from support.trt_programs import with_plans_rewritten

    target = tmp_path_factory.mktemp("sticky") / "sticky.pte"
    return with_plans_rewritten(mixed_16.pte, target, test_sticky_fault="illegal_address")


@pytest.mark.parametrize("path", ["lane", "python"])
def test_a_poisoned_context_is_contained_and_the_model_quarantined(
    tmp_path,
    mixed_16,  # noqa: F811
    sticky,
    path,
):
    server = ServerProcess(
        tmp_path / "artifacts",
        "--backend-setup",
        TEST_BACKEND,
        "--gpu-fault-quarantine-count",
        str(K),
        *(["--access-log", "true"] if path == "python" else []),
    ).start()
    try:
        with server.client() as client:
            assert upload(client, "good", mixed_16.pte).status_code == 201
            assert upload(client, "bad", sticky).status_code == 201
        inputs = mixed_16.example_inputs()
        measured = contain(server, inputs, mixed_16.reference(*inputs)[0].reshape(-1), K)
        print(f"{path}: {measured}")
        assert max(measured.ready_false_s) < 1.0
        assert max(measured.serving_again_s) <= 10.0
        assert "cudaErrorIllegalAddress" in server.log_path.read_text()
    finally:
        server.stop()
