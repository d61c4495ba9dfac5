"""Issue 34, item 3, against a real server: a request the program cannot take because of its
shapes is answered 4xx naming the input and the rule on every backend (ExecuTorch's portable
kernels, XNNPACK, TensorRT through the test engine provider), over the native API and the Open
Inference Protocol; never a 500. A real server fault is a 500 whose body carries an error id that
the server's log line with the cause carries too.
"""

import re

import numpy as np
import pytest

from support.programs import DYNAMIC_BATCH_MAX, export_dynamic_wide
from support.prometheus import parse, value
from support.server import ServerProcess, tensor, upload
from support.trt_program_fixtures import add_dynamic, mixed_16  # noqa: F401

# The test engine provider for TensorRT, and XNNPACK's own setup.
TEST_BACKEND = (
    "support.test_backend_setup:install_test_backend,service.backends.xnnpack:install_backend"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = ServerProcess(
        tmp_path_factory.mktemp("errors") / "artifacts", "--backend-setup", TEST_BACKEND
    ).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def models(server, programs_dir, add_dynamic):  # noqa: F811
    """name -> (one good input set's shapes, the cases that must be refused)."""
    wide = f"[{DYNAMIC_BATCH_MAX}, 32]"
    programs = {
        "portable": export_dynamic_wide(programs_dir).pte,
        "xnnpack": export_dynamic_wide(programs_dir, xnnpack=True).pte,
        "tensorrt": add_dynamic.pte,
    }
    with server.client() as client:
        for name, pte in programs.items():
            response = upload(client, name, pte)
            assert response.status_code == 201, response.text
    one_input = {
        # (shapes, the rule, words the message must hold)
        "wrong inner dim": ([(4, 16)], "input.rejected", "input_0 [4, 16]"),
        "wrong rank": ([(4, 32, 1)], "input.shape", "must have 2 dimension(s)"),
        "rank 1": ([(32,)], "input.shape", "must have 2 dimension(s)"),
        "past the dynamic bound": ([(DYNAMIC_BATCH_MAX + 1, 32)], "input.shape", wide),
        "every dim past the bound": ([(40, 64)], "input.shape", wide),
    }
    return {
        "portable": ([(4, 32)], one_input),
        "xnnpack": ([(4, 32)], one_input),
        "tensorrt": (
            [(3, 5), (3, 5)],
            {
                "wrong inner dim": ([(3, 4), (3, 4)], "input.rejected", "outside"),
                "inputs that differ": ([(4, 5), (3, 5)], "input.rejected", "differ"),
                "wrong rank": ([(3, 5, 1), (3, 5, 1)], "input.shape", "must have 2 dimension(s)"),
                "past the dynamic bound": ([(9, 5), (9, 5)], "input.shape", "[8, 5]"),
                "under the profile's least": ([(1, 5), (1, 5)], "input.rejected", "profile"),
                "empty": ([(0, 5), (0, 5)], "input.rejected", "profile"),
            },
        ),
    }


def _inputs(shapes):
    return [tensor(np.ones(shape, np.float32)) for shape in shapes]


@pytest.mark.parametrize("backend", ["portable", "xnnpack", "tensorrt"])
def test_shapes_a_program_cannot_take_are_4xx_naming_input_and_rule(server, models, backend):
    good, cases = models[backend]
    with server.client() as client:
        assert (
            client.post("/infer", json={"model": backend, "inputs": _inputs(good)}).status_code
            == 200
        )
        for case, (shapes, rule, words) in cases.items():
            response = client.post("/infer", json={"model": backend, "inputs": _inputs(shapes)})
            assert response.status_code == 422, (case, response.text)
            body = response.json()
            [problem] = body["problems"]
            assert problem["rule"] == rule, (case, body)
            assert words in problem["message"], (case, body)
            # A kernel's refusal names the input only where the method has one.
            if rule == "input.shape" or len(shapes) == 1:
                assert problem["input"] == "input_0", (case, body)
            else:
                assert problem.get("input") is None, (case, body)
            v2 = {"inputs": [{"name": f"input_{i}", **t} for i, t in enumerate(_inputs(shapes))]}
            response = client.post(f"/v2/models/{backend}/infer", json=v2)
            assert response.status_code == 400, (case, response.text)
            assert words in response.json()["error"], (case, response.text)
        metrics = parse(client.get("/metrics").text)
    counted = {
        outcome: value(
            metrics,
            "etrt_inference_requests_total",
            model=backend,
            method="forward",
            outcome=outcome,
        )
        for outcome in ("client_error", "error")
    }
    assert counted["client_error"] >= 2 * len(cases) and counted["error"] is None, counted
    assert " ERROR " not in server.log(), server.log()


def test_a_server_fault_is_a_500_whose_error_id_names_the_logged_cause(
    server,
    mixed_16,
    tmp_path,  # noqa: F811
):
    # Imported here: rewriting uses executorch.exir, which the server process never needs.
    from support.trt_programs import with_plans_rewritten

    broken = with_plans_rewritten(
        mixed_16.pte, tmp_path / "broken.pte", test_fail_execute="the GPU fell off the bus"
    )
    with server.client() as client:
        assert upload(client, "broken", broken).status_code == 201
        inputs = [tensor(x) for x in mixed_16.example_inputs()]
        response = client.post("/infer", json={"model": "broken", "inputs": inputs})
        assert response.status_code == 500, response.text
        body = response.json()
        [problem] = body["problems"]
        assert problem["rule"] == "server.internal"
        ident = re.search(r"error id ([0-9a-f]{12})", body["error"]).group(1)
        response = client.post("/infer", json={"model": "broken", "inputs": inputs})
        assert ident not in response.text, "each fault gets its own id"
    [line] = [line for line in server.log().splitlines() if ident in line]
    assert " ERROR " in line and "the GPU fell off the bus" in line, line
