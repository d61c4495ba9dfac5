"""Read-only model directories at start: the same ingest as uploads, refusals listed, the rest
serving, the directory never written, and readiness held until they are loaded."""

import hashlib
import json
import shutil
import time

import httpx
import numpy as np
import torch

from support.model_dirs import layout, snapshot
from support.program_fixtures import external_weights_program, linear_relu_program  # noqa: F401
from support.server import ServerProcess, stored_files, tensor


def predict(client, model, x):
    response = client.post("/infer", json={"model": model, "inputs": [tensor(x)]})
    assert response.status_code == 200, response.text
    [output] = response.json()["outputs"]
    return np.array(output["data"]).reshape(output["shape"])


def expected(program, x):
    with torch.no_grad():
        return program.module(x).numpy()


def test_model_directories_serve_good_entries_and_list_refused_ones(
    tmp_path, linear_relu_program, external_weights_program
):
    models = layout(tmp_path / "models", linear_relu_program, external_weights_program)
    before = snapshot(models)
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    xw = torch.randn(
        *external_weights_program.example_inputs[0].shape,
        generator=torch.Generator().manual_seed(2),
    )
    server = ServerProcess(tmp_path / "artifacts", "--model-dir", str(models))
    try:
        with server.start().client() as client:
            listed = {m["name"]: m for m in client.get("/models").json()}
            assert sorted(listed) == ["good", "missing-data", "weights"]
            assert listed["good"]["state"] == "ready"
            assert listed["good"]["config"] == {"instance_group": [{"count": 1}]}
            assert [f["name"] for f in listed["good"]["files"]] == ["model.pte"]
            refused = listed["missing-data"]
            assert refused["state"] == "unavailable"
            assert [p["rule"] for p in refused["problems"]] == ["external.missing_key"]
            np.testing.assert_allclose(
                predict(client, "good", x), expected(linear_relu_program, x), rtol=1e-5, atol=1e-6
            )
            np.testing.assert_allclose(
                predict(client, "weights", xw),
                expected(external_weights_program, xw),
                rtol=1e-5,
                atol=1e-6,
            )
            response = client.post("/infer", json={"model": "missing-data", "inputs": [tensor(x)]})
            assert response.status_code == 503
        stored_before_restart = stored_files(server.artifacts)
        # Unchanged entries are not ingested again on restart; the models still serve.
        with server.restart().client() as client:
            np.testing.assert_allclose(
                predict(client, "good", x), expected(linear_relu_program, x), rtol=1e-5, atol=1e-6
            )
        assert stored_files(server.artifacts) == stored_before_restart
    finally:
        server.stop()
    assert snapshot(models) == before


def test_kserve_single_model_layout_and_readiness_waits(tmp_path, linear_relu_program):
    mnt = tmp_path / "mnt" / "models"
    mnt.mkdir(parents=True)
    shutil.copy(linear_relu_program.pte, mnt / "linear.pte")
    mnt.chmod(0o555)
    before = snapshot(mnt)
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(4))
    server = ServerProcess(
        tmp_path / "artifacts",
        "--model-dir",
        str(mnt),
        "--model-name",
        "linear",
        "--backend-setup",
        "support.load_check_faults:slow_in_load_check",
    )
    try:
        server.start_process()
        # The server answers while the directory is being checked: not ready yet.
        deadline = time.monotonic() + 60
        statuses = set()
        while time.monotonic() < deadline:
            try:
                status = httpx.get(f"{server.url}/health/ready", timeout=2).status_code
            except httpx.TransportError:
                time.sleep(0.05)
                continue
            statuses.add(status)
            if status == 200:
                break
            time.sleep(0.05)
        assert statuses == {503, 200}
        with server.client() as client:
            [model] = client.get("/models").json()
            assert model["name"] == "linear" and model["state"] == "ready"
            np.testing.assert_allclose(
                predict(client, "linear", x), expected(linear_relu_program, x), rtol=1e-5, atol=1e-6
            )
    finally:
        server.stop()
    assert snapshot(mnt) == before
