"""The CPU image (docker/Dockerfile on python:3.11-slim or its stand-in), run as a user runs it.

Black box: real exported programs go in over HTTP, predictions come back over /infer, /v2 and
gRPC from outside the container; `podman` itself is asked only what only it knows (image size,
healthcheck, the uid processes run as, exit codes).
"""

from __future__ import annotations

import json
import time

import numpy as np
import torch
import tritonclient.grpc as triton

from support.foreign_delegate import serve_xnnpack_linear, xnnpack_linear_model
from support.program_fixtures import mix_of_ops_program
from support.server import tensor, upload

# The runtime image's budget above its base (docs/containers-image.md lists what it holds).
MAX_ADDED_BYTES = 180 * 1024 * 1024


def _deploy(container, program, name="mix"):
    with container.client() as client:
        response = upload(client, name, program.pte, program.ptds)
    assert response.status_code == 201, response.text
    return response.json()


def _inputs():
    generator = torch.Generator().manual_seed(7)
    return torch.randn(3, 8, generator=generator), torch.tensor([1, 4, 9])


def _check_infer(container, program, name="mix"):
    """/infer over HTTP matches eager PyTorch."""
    x, idx = _inputs()
    expected = [t.detach().numpy() for t in program.module(x, idx)]
    with container.client() as client:
        response = client.post("/infer", json={"model": name, "inputs": [tensor(x), tensor(idx)]})
    assert response.status_code == 200, response.text
    outputs = response.json()["outputs"]
    for got, want in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(np.array(got["data"]).reshape(want.shape), want, rtol=1e-5)
    return expected


def test_the_image_keeps_its_healthcheck_and_adds_at_most_180_mib(engine, cpu_image):
    [inspected] = json.loads(engine.podman("image", "inspect", cpu_image.tag).stdout)
    healthcheck = inspected.get("Healthcheck") or inspected["Config"].get("Healthcheck")
    assert healthcheck and "service.healthcheck" in " ".join(healthcheck["Test"])
    assert inspected["Config"]["User"] == "10001"
    added = engine.image_size(cpu_image.tag) - engine.image_size(cpu_image.base)
    print(f"the CPU image: {added / 2**20:.1f} MiB above {cpu_image.base}")
    assert 0 < added <= MAX_ADDED_BYTES, f"{added / 2**20:.0f} MiB above {cpu_image.base}"


def test_what_only_build_or_export_needs_is_not_in_the_image(engine, cpu_image):
    """pip, setuptools, executorch's Python export stack, headers and flatc (its console script
    too) and a compiler are left in the build stages; the native host still imports."""
    script = (
        "import importlib.util as u, pathlib, shutil; "
        "import ethost; "
        "et = pathlib.Path(list(u.find_spec('executorch').submodule_search_locations)[0]); "
        "print(sorted(p.name for p in et.iterdir()), u.find_spec('pip') is None "
        "or not u.find_spec('pip').origin.startswith('/opt/etrt'), "
        "u.find_spec('setuptools') is None or not u.find_spec('setuptools').origin.startswith("
        "'/opt/etrt'), shutil.which('g++'), shutil.which('flatc'))"
    )
    done = engine.podman("run", "--rm", "--entrypoint", "python", cpu_image.tag, "-c", script)
    assert done.stdout.split() == ["['lib']", "True", "True", "None", "None"], done.stdout


def test_an_xnnpack_program_runs_on_the_trimmed_executorch(engine, cpu_image, volume, programs_dir):
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = xnnpack_linear_model()(x).numpy()
    container = engine.run_server(cpu_image.tag, volume)
    container.wait_ready()
    with container.client() as client:
        output = serve_xnnpack_linear(client, programs_dir, x)
    np.testing.assert_allclose(
        np.array(output["data"]).reshape(2, 3), expected, rtol=1e-5, atol=1e-6
    )


def test_the_healthcheck_follows_the_port_flag_and_etrt_port(engine, cpu_image, volume):
    """KServe's runtime starts the image with `--port 8080` while ETRT_PORT stays 8000; Compose
    and `docker run -e` set ETRT_PORT. The healthcheck probes the port the server took."""
    flagged = engine.run_server(cpu_image.tag, volume, "--port", "8080", http_inside=8080)
    flagged.wait_ready()
    check = engine.podman("healthcheck", "run", flagged.name, check=False)
    assert check.returncode == 0, f"healthcheck failed: {check.stdout}{check.stderr}"
    probe = engine.podman("exec", flagged.name, "python", "-m", "service.healthcheck")
    assert probe.stdout.strip() == "healthy: http://127.0.0.1:8080/health/ready"
    engine.podman("rm", "-f", "-t", "20", flagged.name)

    by_env = engine.run_server(cpu_image.tag, volume, http_inside=9000, ETRT_PORT="9000")
    by_env.wait_ready()
    check = engine.podman("healthcheck", "run", by_env.name, check=False)
    assert check.returncode == 0, f"healthcheck failed: {check.stdout}{check.stderr}"
    probe = engine.podman("exec", by_env.name, "python", "-m", "service.healthcheck")
    assert probe.stdout.strip() == "healthy: http://127.0.0.1:9000/health/ready"


def test_serves_a_real_program_over_infer_v2_and_grpc(
    engine, cpu_image, volume, mix_of_ops_program
):
    program = mix_of_ops_program
    container = engine.run_server(cpu_image.tag, volume)
    container.wait_ready()
    description = _deploy(container, program)
    assert description["state"] == "ready"
    expected = _check_infer(container, program)
    x, idx = _inputs()
    with container.client() as client:
        body = {"inputs": [tensor(x, "input_0"), tensor(idx, "input_1")]}
        response = client.post("/v2/models/mix/infer", json=body)
    assert response.status_code == 200, response.text
    v2 = {o["name"]: o for o in response.json()["outputs"]}
    np.testing.assert_allclose(np.array(v2["output_1"]["data"]), expected[1].ravel(), rtol=1e-5)
    with triton.InferenceServerClient(container.grpc_url) as client:
        inputs = [
            triton.InferInput("input_0", [3, 8], "FP32").set_data_from_numpy(x.numpy()),
            triton.InferInput("input_1", [3], "INT64").set_data_from_numpy(idx.numpy()),
        ]
        result = client.infer("mix", inputs)
    np.testing.assert_allclose(result.as_numpy("output_0"), expected[0], rtol=1e-5)


def test_every_process_runs_as_uid_10001_and_the_healthcheck_passes(engine, cpu_image, volume):
    container = engine.run_server(cpu_image.tag, volume)
    container.wait_ready()
    script = (
        "import os; print(sorted({os.stat(f'/proc/{p}').st_uid for p in os.listdir('/proc')"
        " if p.isdigit()}), os.stat('/artifacts').st_uid)"
    )
    done = engine.podman("exec", container.name, "python", "-c", script)
    assert done.stdout.split() == ["[10001]", "10001"], done.stdout
    check = engine.podman("healthcheck", "run", container.name, check=False)
    assert check.returncode == 0, f"healthcheck failed: {check.stdout}{check.stderr}"


def test_models_persist_on_the_volume_across_recreation(
    engine, cpu_image, volume, mix_of_ops_program
):
    program = mix_of_ops_program
    first = engine.run_server(cpu_image.tag, volume)
    first.wait_ready()
    _deploy(first, program, name="kept")
    engine.podman("rm", "-f", "-t", "20", first.name)
    second = engine.run_server(cpu_image.tag, volume)
    second.wait_ready()
    with second.client() as client:
        assert [m["name"] for m in client.get("/models").json()] == ["kept"]
    _check_infer(second, program, name="kept")


def test_a_second_container_on_the_same_volume_exits_naming_the_store(engine, cpu_image, volume):
    first = engine.run_server(cpu_image.tag, volume)
    first.wait_ready()
    second = engine.run_server(cpu_image.tag, volume)
    assert second.wait_exit(timeout=60) != 0
    assert "/artifacts" in second.logs() and "error:" in second.logs(), second.logs()
    assert first.state()["Running"]


def test_sigterm_stops_the_server_cleanly_and_quickly(engine, cpu_image, volume):
    container = engine.run_server(cpu_image.tag, volume)
    container.wait_ready()
    started = time.monotonic()
    engine.podman("kill", "--signal", "TERM", container.name)
    assert container.wait_exit(timeout=30) == 0, container.logs()
    assert time.monotonic() - started < 15
