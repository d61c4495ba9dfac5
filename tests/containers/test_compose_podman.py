"""docker-compose.yml's cpu profile brought up with podman-compose, as the README starts it.

`up --build` builds from docker/Dockerfile (its layers are cached from the CPU image fixture),
on the python:3.11-slim stand-in named through ETRT_CPU_BASE_IMAGE; the ports are free ones
named through ETRT_PUBLISH_*; the token and the access log come from the environment too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from support.containers import Container
from support.program_fixtures import linear_relu_program
from support.server import REPO, free_port, tensor, upload

TOKEN = "compose-test-admin-token"


def _podman_compose() -> str:
    beside = Path(sys.executable).parent / "podman-compose"
    found = str(beside) if beside.exists() else shutil.which("podman-compose")
    if found is None:
        pytest.fail(
            "podman-compose is not installed (it is in the test extra: pip install .[test])"
        )
    return found


@pytest.fixture
def compose(engine, cpu_image):
    """compose(*args) runs podman-compose on the committed file in a project of its own."""
    project = f"etrt-test-{os.getpid()}-{os.urandom(3).hex()}"
    env = {k: v for k, v in engine.env.items() if not k.startswith(("ETRT_", "COMPOSE_"))}
    env.update(
        ETRT_CPU_BASE_IMAGE=cpu_image.base,
        ETRT_PUBLISH_HTTP_PORT=str(free_port()),
        ETRT_PUBLISH_GRPC_PORT=str(free_port()),
        ETRT_ADMIN_TOKEN=TOKEN,
        ETRT_ACCESS_LOG="true",
        ETRT_LOG_LEVEL="debug",
        ETRT_HEALTH_START_PERIOD="1m",
    )
    command = [_podman_compose(), "-p", project, "-f", str(REPO / "docker-compose.yml")]

    def run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [*command, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"podman-compose {' '.join(args)}:\n{done.stderr[-6000:]}"
        return done

    run.project = project
    run.http_port = int(env["ETRT_PUBLISH_HTTP_PORT"])
    run.grpc_port = int(env["ETRT_PUBLISH_GRPC_PORT"])
    yield run
    subprocess.run([*command, "down", "-v"], cwd=REPO, env=env, capture_output=True, timeout=300)


def _server(engine, compose) -> Container:
    done = engine.podman(
        "ps", "-a", "--filter", f"label=io.podman.compose.project={compose.project}"
    )
    names = [line.split()[-1] for line in done.stdout.splitlines()[1:]]
    assert len(names) == 1, f"expected the cpu server only, got {names}"
    return Container(engine, names[0], compose.http_port, compose.grpc_port)


def _predict(container, program):
    x = np.array([[0.5, -1.0, 2.0, 0.25], [1.0, 1.0, -3.0, 0.0]], dtype=np.float32)
    with container.client() as client:
        response = client.post("/infer", json={"model": "linear", "inputs": [tensor(x)]})
    assert response.status_code == 200, response.text
    return response.json()["outputs"][0]["data"]


def test_the_cpu_profile_comes_up_with_env_overrides_restarts_and_keeps_its_store(
    engine, compose, linear_relu_program
):
    compose("up", "-d", "--build")
    server = _server(engine, compose)
    server.wait_ready(timeout=180)
    [inspected] = json.loads(engine.podman("inspect", server.name).stdout)
    assert inspected["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"

    with server.client(token=None) as client:
        refused = upload(client, "linear", linear_relu_program.pte)
        assert refused.status_code == 401, refused.text
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        assert upload(client, "linear", linear_relu_program.pte).status_code == 201
    expected = _predict(server, linear_relu_program)
    assert '"POST /infer HTTP/1.1" 200' in server.logs(), server.logs()[-3000:]
    assert " DEBUG " in server.logs()

    # A crash (the server killed from outside) is restarted by the restart policy.
    pid = inspected["State"]["Pid"]
    os.kill(pid, 9)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and server.state().get("Pid") in (pid, 0):
        time.sleep(0.5)
    server.wait_ready(timeout=120)
    assert _predict(server, linear_relu_program) == expected

    compose("down")
    compose("up", "-d")
    server = _server(engine, compose)
    server.wait_ready(timeout=120)
    assert _predict(server, linear_relu_program) == expected
    with httpx.Client(base_url=server.url) as client:
        assert [m["name"] for m in client.get("/models").json()] == ["linear"]


def test_the_gpu_profile_asks_podman_for_every_gpu_through_cdi(engine):
    """podman-compose turns the gpu service's device reservation into `--device nvidia.com/gpu=all`
    (CDI), which the README's podman notes rely on; --dry-run prints the commands only (it does
    create the project's volumes, removed here)."""
    project = f"etrt-test-dry-{os.getpid()}-{os.urandom(3).hex()}"
    env = {k: v for k, v in engine.env.items() if not k.startswith(("ETRT_", "COMPOSE_"))}
    try:
        done = subprocess.run(
            [_podman_compose(), "--verbose", "--dry-run", "-p", project, "--profile", "gpu"]
            + ["-f", str(REPO / "docker-compose.yml"), "up", "-d"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        label = f"label=io.podman.compose.project={project}"
        volumes = engine.podman("volume", "ls", "-q", "--filter", label).stdout.split()
        if volumes:
            engine.podman("volume", "rm", "-f", *volumes, check=False)
    assert done.returncode == 0, done.stderr
    output = (done.stdout + done.stderr).splitlines()
    [create] = [line for line in output if "podman create" in line and "service=gpu" in line]
    assert "--device nvidia.com/gpu=all" in create, create
