"""The README's first-model path, as written: its export recipe (the Python block under "Your
first model", run as it stands), its `etrt` and curl commands (sent as the same form and body),
and what it says about unloading (an unloaded model stays unloaded across a restart)."""

import json
import re

import numpy as np
import torch

from support.cli import etrt
from support.program_fixtures import linear_relu_program
from support.server import REPO, ServerProcess, upload

README = (REPO / "README.md").read_text()


def _first_model_recipe() -> str:
    section = README[README.index("## Your first model") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _curl_infer_body() -> dict:
    section = README[README.index("## Your first model") :]
    return json.loads(re.search(r"/infer \\\n\s+-d '(\{.*?\})'", section).group(1))


def test_the_first_model_recipe_deploys_and_predicts_as_the_readme_says(
    start_server, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(_first_model_recipe(), namespace)  # the README's block, unchanged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pte"]  # "one file"
    server = start_server()
    env = {"ETRT_URL": server.url}
    assert etrt("check", tmp_path / "model.pte").code == 0
    deployed = etrt("deploy", "mymodel", tmp_path / "model.pte", "--json", env=env)
    assert deployed.code == 0, deployed.err
    described = deployed.json()
    assert [d["backend"] for d in described["methods"][0]["delegates"]] == ["XnnpackBackend"]
    # `etrt infer mymodel --input x.json` with the README's x.json
    (tmp_path / "x.json").write_text(json.dumps([[1, 2, 3, 4]]))
    inferred = etrt("infer", "mymodel", "--input", tmp_path / "x.json", "--json", env=env)
    assert inferred.code == 0, inferred.err
    with torch.no_grad():
        expected = namespace["model"](torch.tensor([[1.0, 2.0, 3.0, 4.0]])).numpy()
    [output] = inferred.json()["outputs"]
    np.testing.assert_allclose(np.reshape(output["data"], (1, 3)), expected, rtol=1e-5)
    # the curl block: the same form (name, program) and the same JSON body
    with server.client() as client:
        with open(tmp_path / "model.pte", "rb") as program:
            response = client.post(
                "/models",
                data={"name": "curl-model"},
                files={"program": ("model.pte", program)},
            )
        assert response.status_code == 201, response.text
        body = _curl_infer_body()
        assert body["model"] == "mymodel"
        response = client.post("/infer", json=body)
        assert response.status_code == 200, response.text
    [output] = response.json()["outputs"]
    np.testing.assert_allclose(np.reshape(output["data"], (1, 3)), expected, rtol=1e-5)


def test_an_unloaded_model_stays_unloaded_across_a_restart(tmp_path, linear_relu_program):
    server = ServerProcess(tmp_path / "artifacts").start()
    try:
        with server.client() as client:
            assert upload(client, "m", linear_relu_program.pte).status_code == 201
            assert client.post("/v2/repository/models/m/unload").status_code == 200
        server.restart()
        with server.client() as client:
            index = client.post("/v2/repository/index").json()
            assert index == [
                {"name": "m", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
            ]
            assert client.get("/v2/models/m/ready").status_code == 503
            assert client.post("/v2/repository/models/m/load").status_code == 200
        server.restart()
        with server.client() as client:
            assert client.get("/v2/models/m/ready").status_code == 200
    finally:
        server.stop()
