"""`python -m service.healthcheck` (the image's HEALTHCHECK) against real server processes.

The probe must follow the port the server took, whether `--port`, Knative's PORT or ETRT_PORT
chose it: each server here is started with an ETRT_PORT or flag that differs from what a fixed
probe would try.
The container lane runs the same probe inside the image (tests/containers/test_cpu_image.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from support.server import REPO, TESTS, free_port


def _healthcheck(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "service.healthcheck", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _start(tmp_path, args: list[str], env: dict) -> subprocess.Popen:
    """A server as the image's entrypoint starts it: `python -m service FLAGS`, ETRT_* env."""
    full_env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{TESTS}", **env}
    log = open(tmp_path / "server.log", "ab")
    process = subprocess.Popen(
        [sys.executable, "-m", "service", "--artifacts", str(tmp_path / "artifacts"), *args],
        cwd=REPO,
        env=full_env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    return process


def _wait_ready(process: subprocess.Popen, port: int, tmp_path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, (tmp_path / "server.log").read_text()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health/ready", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError((tmp_path / "server.log").read_text())


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    process.wait(30)


def test_the_probe_follows_the_port_flag_over_etrt_port(tmp_path):
    port, decoy = free_port(), free_port()
    process = _start(
        tmp_path,
        ["--host", "127.0.0.1", "--port", str(port), "--grpc-port", "0"],
        {"ETRT_PORT": str(decoy)},
    )
    try:
        _wait_ready(process, port, tmp_path)
        done = _healthcheck("--pid", str(process.pid))
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip() == f"healthy: http://127.0.0.1:{port}/health/ready"
    finally:
        _stop(process)
    # The same process gone: one line saying so, exit 1.
    done = _healthcheck("--pid", str(process.pid))
    assert done.returncode == 1
    assert done.stdout.startswith(f"unhealthy: cannot read process {process.pid}"), done.stdout


def test_the_probe_follows_etrt_port_and_a_wildcard_host(tmp_path):
    port = free_port()
    process = _start(
        tmp_path,
        ["--grpc-port", "0"],
        {"ETRT_PORT": str(port), "ETRT_HOST": "0.0.0.0", "ETRT_ADMIN_TOKEN": "x" * 32},
    )
    try:
        _wait_ready(process, port, tmp_path)
        done = _healthcheck("--pid", str(process.pid))
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip() == f"healthy: http://127.0.0.1:{port}/health/ready"
    finally:
        _stop(process)


def test_the_server_and_the_probe_take_knatives_port_over_etrt_port(tmp_path):
    """Knative sets PORT; the image sets ETRT_PORT=8000: the server listens on PORT."""
    port, decoy = free_port(), free_port()
    process = _start(
        tmp_path,
        ["--host", "127.0.0.1", "--grpc-port", "0"],
        {"PORT": str(port), "ETRT_PORT": str(decoy)},
    )
    try:
        _wait_ready(process, port, tmp_path)
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{decoy}/health/live", timeout=2)
        done = _healthcheck("--pid", str(process.pid))
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip() == f"healthy: http://127.0.0.1:{port}/health/ready"
    finally:
        _stop(process)


def test_a_process_that_is_not_the_server_is_named(tmp_path):
    done = _healthcheck("--pid", str(os.getpid()))
    assert done.returncode == 1
    assert done.stdout.strip() == f"unhealthy: process {os.getpid()} is not `python -m service`"
