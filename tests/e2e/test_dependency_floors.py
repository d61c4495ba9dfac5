"""The lowest versions pyproject.toml allows of the two dependencies whose internals this server
relies on, installed beside the test environment and used by a real server: the fronts' HTTP
transport subclasses uvicorn's httptools protocol (service/front/protocols/http_transport.py,
down to its private `_start_asgi_task`, which uvicorn 0.44 and older lack), and the fronts' native
path writes JSON numbers as orjson does (runtime_ext/front/json_numbers.h; orjson before 3.11.7
writes some of them otherwise, e.g. 1e39 as 1e+39). Each is pinned to the range tested
(`>=low,<high`); moving either end means this test passes there.
"""

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from support.program_fixtures import linear_relu_program  # noqa: F401
from support.server import ServerProcess, tensor, upload

REPO = Path(__file__).resolve().parents[2]
PINNED = ("uvicorn", "orjson")

pytestmark = pytest.mark.slow


def tested_ranges() -> dict[str, tuple[str, str]]:
    """{name: (lowest allowed, first not allowed)} from pyproject.toml's dependencies."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    ranges = {}
    for requirement in project["dependencies"]:
        found = re.fullmatch(r"([\w-]+)>=([\w.]+),<([\w.]+)", requirement.replace(" ", ""))
        if found and found[1] in PINNED:
            ranges[found[1]] = (found[2], found[3])
    return ranges


def test_each_relied_on_dependency_has_a_tested_range():
    assert set(tested_ranges()) == set(PINNED), "uvicorn and orjson need `>=low,<high`"


@pytest.fixture(scope="module")
def floors(tmp_path_factory) -> Path:
    """A folder holding the lowest allowed versions, ahead of the environment's on PYTHONPATH."""
    target = tmp_path_factory.mktemp("floors")
    pins = [f"{name}=={low}" for name, (low, _) in tested_ranges().items()]
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
    subprocess.run([*install, *pins], check=True, timeout=600)
    return target


def _env(floors: Path) -> dict:
    paths = [str(REPO), str(REPO / "tests"), str(floors)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def test_the_floor_versions_are_the_ones_imported(floors):
    script = "import orjson, uvicorn; print(uvicorn.__version__, orjson.__version__)"
    found = subprocess.run(
        [sys.executable, "-c", script], env=_env(floors), capture_output=True, text=True
    )
    assert found.returncode == 0, found.stderr
    uvicorn_version, orjson_version = found.stdout.split()
    ranges = tested_ranges()
    assert uvicorn_version.startswith(ranges["uvicorn"][0]), uvicorn_version
    assert orjson_version.startswith(ranges["orjson"][0]), orjson_version


def test_fronts_on_the_lowest_uvicorn_serve_every_http_path(
    floors,
    tmp_path,
    linear_relu_program,  # noqa: F811
):
    env = {"PYTHONPATH": _env(floors)["PYTHONPATH"]}
    server = ServerProcess(tmp_path / "artifacts", "--workers", "2", env=env).start()
    try:
        x = linear_relu_program.example_inputs[0]
        expected = linear_relu_program.module(x).detach().numpy()
        with server.client() as client:
            assert upload(client, "lin", linear_relu_program.pte).status_code == 201
            for _ in range(4):  # the native path, whole requests
                answer = client.post("/infer", json={"model": "lin", "inputs": [tensor(x)]})
                assert answer.status_code == 200, answer.text
                got = np.asarray(answer.json()["outputs"][0]["data"], np.float32)
                assert np.allclose(got.reshape(expected.shape), expected, atol=1e-5)
            # A body sent after its head goes through uvicorn's parser and request cycle.
            parts = iter([b'{"model": "lin", "inputs": [', json.dumps(tensor(x)).encode(), b"]}"])
            answer = client.post("/infer", content=parts)
            assert answer.status_code == 200, answer.text
            refused = client.post("/infer", json={"model": "lin", "inputs": []})
            assert refused.status_code == 422 and "input" in refused.json()["error"]
        http = httpclient.InferenceServerClient(server.url.removeprefix("http://"))
        for binary in (True, False):
            given = httpclient.InferInput("input_0", list(x.shape), "FP32")
            given.set_data_from_numpy(x.numpy(), binary_data=binary)
            asked = [httpclient.InferRequestedOutput("output_0", binary)]
            result = http.infer("lin", [given], outputs=asked)
            assert np.allclose(result.as_numpy("output_0"), expected, atol=1e-5)
    finally:
        server.stop()
    assert "Traceback" not in server.log()


def test_the_native_paths_json_numbers_agree_with_the_lowest_orjson(floors):
    """The unit tests that compare the native writer with orjson, run against the floor."""
    checks = "orjson or non_finite or half_bfloat"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/unit/test_front_lane.py", "-k", checks],
        cwd=REPO, env=_env(floors), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert re.search(r"\b4 passed", run.stdout), run.stdout[-2000:]
