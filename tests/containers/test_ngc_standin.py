"""The GPU/Jetson path of docker/Dockerfile on a stand-in for NGC's TensorRT image.

NGC's images cannot be pulled here; the stand-in (images/ngc-tensorrt.Containerfile) has what the
Dockerfile branches on: a system Python without venv and without C headers, a `tensorrt` package
in dist-packages and NVIDIA's entrypoint script. No GPU is needed to show that the image builds,
that the TensorRT gate passes or refuses, and that the server starts through NVIDIA's entrypoint
and sees the base image's TensorRT.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from support import containers
from support.program_fixtures import linear_relu_program
from support.server import REPO, tensor, upload

STANDIN_TENSORRT = "11.1.0.106"
GPU_TAG = "localhost/etrt-test/etrt-server:gpu"
DOCKERFILE = REPO / "docker" / "Dockerfile"


@pytest.fixture(scope="module")
def ngc_base(engine) -> str:
    return containers.local_image(
        engine,
        f"localhost/etrt-test/ngc-tensorrt:{STANDIN_TENSORRT}",
        "ngc-tensorrt.Containerfile",
        DEBIAN=containers.debian_base(engine),
        TENSORRT_VERSION=STANDIN_TENSORRT,
    )


@pytest.fixture(scope="module")
def gpu_image(engine, ngc_base) -> str:
    done = engine.build(
        GPU_TAG, DOCKERFILE, REPO, BASE_IMAGE=ngc_base, ETRT_TENSORRT_VERSION="11.1"
    )
    assert done.returncode == 0, f"the GPU image did not build:\n{done.stderr[-6000:]}"
    return GPU_TAG


def test_the_gate_refuses_another_tensorrt_before_downloading_anything(engine, ngc_base):
    started = time.monotonic()
    done = engine.build(
        "localhost/etrt-test/etrt-server:refused",
        DOCKERFILE,
        REPO,
        timeout=300,
        BASE_IMAGE=ngc_base,
        ETRT_TENSORRT_VERSION="10.3",
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert f"this base image has TensorRT {STANDIN_TENSORRT}, not 10.3" in output, output[-3000:]
    # The gate is the first step: neither apt nor pip ran.
    assert "executorch" not in done.stdout.lower() and "apt-get" not in done.stdout
    assert time.monotonic() - started < 120


def test_a_base_without_tensorrt_is_refused_in_one_line_naming_the_fix(engine):
    """ETRT_TENSORRT_VERSION on a base with no TensorRT module (a CPU Python image): the gate's
    one line, not a traceback ending in ModuleNotFoundError."""
    done = engine.build(
        "localhost/etrt-test/etrt-server:refused",
        DOCKERFILE,
        REPO,
        timeout=300,
        BASE_IMAGE=containers.python_base(engine),
        ETRT_TENSORRT_VERSION="11.1",
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0
    [line] = [line for line in output.splitlines() if line.startswith("error: ")]
    assert "no TensorRT Python module (tensorrt, tensorrt_lean" in line, line
    assert "--build-arg BASE_IMAGE=nvcr.io/nvidia/tensorrt:" in line, line
    assert "Traceback" not in output and "ModuleNotFoundError" not in output


def test_the_image_builds_on_a_python_without_venv_or_headers(engine, ngc_base, gpu_image):
    probe = (
        "import importlib.util, sysconfig, os; "
        "print(importlib.util.find_spec('venv') is None or importlib.util.find_spec('ensurepip') "
        "is None, os.path.exists(os.path.join(sysconfig.get_path('include'), 'Python.h')))"
    )
    done = engine.podman("run", "--rm", ngc_base, "python3", "-c", probe)
    # The stand-in really lacks both, so the Dockerfile's install branches ran.
    assert done.stdout.split()[-1] == "False" and done.stdout.split()[-2] == "True"


def test_the_server_starts_through_nvidia_entrypoint_and_sees_the_base_tensorrt(
    engine, gpu_image, linear_relu_program
):
    volume = f"etrt-test-gpu-{time.time_ns()}"
    engine.podman("volume", "create", volume)
    try:
        server = engine.run_server(gpu_image, volume)
        server.wait_ready()
        assert "TensorRT stand-in (NGC entrypoint)" in server.logs()
        # The healthcheck finds the server behind NVIDIA's entrypoint, in the venv's Python.
        check = engine.podman("healthcheck", "run", server.name, check=False)
        assert check.returncode == 0, f"healthcheck failed: {check.stdout}{check.stderr}"
        with server.client() as client:
            assert client.get("/v2").json()["tensorrt_version"] == STANDIN_TENSORRT
            assert upload(client, "linear", linear_relu_program.pte).status_code == 201
            x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, -1.0, 0.5, 2.0]])
            response = client.post("/infer", json={"model": "linear", "inputs": [tensor(x)]})
        assert response.status_code == 200, response.text
        [output] = response.json()["outputs"]
        expected = linear_relu_program.module(x).detach().numpy()
        np.testing.assert_allclose(np.array(output["data"]).reshape(2, 3), expected, rtol=1e-5)
    finally:
        engine.remove_started()
        engine.podman("volume", "rm", "-f", volume, check=False)
