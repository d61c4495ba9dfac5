"""The arm64 (Jetson) image: docker/Dockerfile built with `--platform linux/arm64` and run, both
under qemu-user-static, on an arm64 Debian base made the same way as the amd64 one.

No NGC arm64 image or Jetson is reachable here, so this is the CPU image for arm64: it proves the
Dockerfile, the executorch arm64 wheel and the native build work for that architecture and that
the server answers health and a CPU model (portable kernels and XNNPACK's arm64 kernels). It is
the slow part of the lane (the native build runs emulated): `ARM64_BUILD_TIMEOUT_S` bounds it.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
import torch

from support import containers
from support.foreign_delegate import serve_xnnpack_linear, xnnpack_linear_model
from support.program_fixtures import linear_relu_program
from support.server import REPO, tensor, upload

pytestmark = pytest.mark.arm64

ARM64_TAG = "localhost/etrt-test/etrt-server:cpu-arm64"
ARM64_BUILD_TIMEOUT_S = 3600
# Python under emulation starts its processes (supervisor, engine, fronts) several times slower.
EMULATED_READY_S = 300


@pytest.fixture(scope="module")
def arm64_image(engine) -> tuple[str, str]:
    missing = containers.emulation_missing("arm64")
    if missing:
        pytest.fail(f"the arm64 image needs emulation: {missing}")
    base = containers.python_base_for(engine, "arm64")
    started = time.monotonic()
    done = engine.build(
        ARM64_TAG,
        REPO / "docker" / "Dockerfile",
        REPO,
        timeout=ARM64_BUILD_TIMEOUT_S,
        platform="linux/arm64",
        BASE_IMAGE=base,
    )
    assert done.returncode == 0, f"the arm64 image did not build:\n{done.stderr[-6000:]}"
    print(f"arm64 image built in {time.monotonic() - started:.0f} s")
    return ARM64_TAG, base


def test_the_image_is_arm64_with_arm64_binaries_inside(engine, arm64_image):
    tag, base = arm64_image
    [inspected] = json.loads(engine.podman("image", "inspect", tag).stdout)
    assert inspected["Architecture"] == "arm64"
    probe = (
        "import platform, sysconfig, ethost; "
        "print(platform.machine(), sysconfig.get_config_var('EXT_SUFFIX'), ethost.__file__)"
    )
    done = engine.podman("run", "--rm", "--entrypoint", "python", tag, "-c", probe, timeout=300)
    machine, suffix, module = done.stdout.split()
    assert machine == "aarch64" and "aarch64" in suffix and module.endswith(suffix), done.stdout
    added = engine.image_size(tag) - engine.image_size(base)
    print(f"arm64 image: {added / 2**20:.0f} MiB above {base}")


def test_the_server_answers_health_and_cpu_models_under_emulation(
    engine, arm64_image, volume, linear_relu_program, programs_dir
):
    tag, _ = arm64_image
    container = engine.run_server(tag, volume, "--workers", "1")
    container.wait_ready(timeout=EMULATED_READY_S)
    check = engine.podman("healthcheck", "run", container.name, check=False, timeout=120)
    assert check.returncode == 0, f"healthcheck failed: {check.stdout}{check.stderr}"
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.0, -1.0, 0.5, 2.0]])
    with container.client() as client:
        assert client.get("/v2").json()["extensions"], "no v2 server metadata"
        assert upload(client, "linear", linear_relu_program.pte).status_code == 201
        response = client.post("/infer", json={"model": "linear", "inputs": [tensor(x)]})
        assert response.status_code == 200, response.text
        [output] = response.json()["outputs"]
        expected = linear_relu_program.module(x).detach().numpy()
        np.testing.assert_allclose(np.array(output["data"]).reshape(2, 3), expected, rtol=1e-5)

        output = serve_xnnpack_linear(client, programs_dir, x)
    with torch.no_grad():
        expected = xnnpack_linear_model()(x).numpy()
    np.testing.assert_allclose(
        np.array(output["data"]).reshape(2, 3), expected, rtol=1e-5, atol=1e-6
    )
