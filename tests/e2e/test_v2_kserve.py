"""The KServe v2 REST client (kserve.InferenceRESTClient, unmodified) against a real server.

The client runs in a child process (support/kserve_calls.py says why).
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from support.program_fixtures import mix_of_ops_program  # noqa: F401
from support.server import upload

CALLS = Path(__file__).parent.parent / "support" / "kserve_calls.py"


def kserve(call: dict) -> dict:
    done = subprocess.run(
        [sys.executable, str(CALLS), json.dumps(call)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def tensor(name, array, datatype):
    return {
        "name": name,
        "shape": list(array.shape),
        "datatype": datatype,
        "numpy": str(array.dtype),
        "data": array.ravel().tolist(),
    }


def test_health_and_model_readiness(shared_server, mix_of_ops_program):
    with shared_server.client() as http:
        assert upload(http, "mix", mix_of_ops_program.pte).status_code == 201
    answer = kserve({"kind": "probe", "url": shared_server.url, "models": ["mix", "absent"]})
    assert answer == {"live": True, "ready": True, "models": [True, False]}


@pytest.mark.parametrize("binary_data", [False, True])
def test_infer_json_and_binary(shared_server, mix_of_ops_program, binary_data):
    with shared_server.client() as http:
        upload(http, "mix", mix_of_ops_program.pte)
    x, idx = mix_of_ops_program.example_inputs
    answer = kserve(
        {
            "kind": "infer",
            "url": shared_server.url,
            "model": "mix",
            "id": "k-1",
            "binary_data": binary_data,
            "outputs": ["output_1"],
            "inputs": [
                tensor("input_0", x.numpy(), "FP32"),
                tensor("input_1", idx.numpy(), "INT64"),
            ],
        }
    )
    assert answer["model_name"] == "mix" and answer["id"] == "k-1", answer
    [output] = answer["outputs"]
    assert output["name"] == "output_1"
    expected = mix_of_ops_program.module(x, idx)[1].detach().numpy()
    assert output["shape"] == list(expected.shape)
    np.testing.assert_allclose(
        np.asarray(output["data"]).reshape(expected.shape), expected, rtol=1e-5
    )


def test_errors_carry_our_message(shared_server):
    answer = kserve(
        {
            "kind": "infer",
            "url": shared_server.url,
            "model": "absent",
            "binary_data": False,
            "inputs": [tensor("input_0", np.ones(1, np.float32), "FP32")],
        }
    )
    assert "model 'absent' not found" in answer["error"] and "404" in answer["error"], answer


@pytest.mark.parametrize("binary_data", [False, True])
def test_the_clients_requests_take_the_fronts_native_path(
    shared_server, mix_of_ops_program, binary_data
):
    """httpx, under KServe's client, writes a request's head and its body apart: the front holds
    a head read alone for its body, so the native path takes every one of them."""
    import time

    from support.prometheus import parse, series

    def native() -> float:
        with shared_server.client() as http:
            text = http.get("/metrics").text
        return sum(series(parse(text), "etrt_front_native_requests_total").values())

    with shared_server.client() as http:
        upload(http, "mix", mix_of_ops_program.pte)
    x, idx = mix_of_ops_program.example_inputs
    call = {
        "kind": "infer",
        "url": shared_server.url,
        "model": "mix",
        "binary_data": binary_data,
        "inputs": [tensor("input_0", x.numpy(), "FP32"), tensor("input_1", idx.numpy(), "INT64")],
    }
    assert "outputs" in kserve(call)  # the front learns the model's table
    time.sleep(1.5)  # the fronts report their counts every half second
    before = native()
    assert "outputs" in kserve({**call, "repeat": 20})
    deadline = time.monotonic() + 10
    while native() < before + 20 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert native() >= before + 20
