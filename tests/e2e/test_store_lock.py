"""One server per artifacts folder: a second real server on the same folder exits at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from support.server import REPO, TESTS, ServerProcess, free_port


def _second_server(artifacts) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(TESTS)]))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "service",
            "--host",
            "127.0.0.1",
            "--port",
            str(free_port()),
            "--artifacts",
            str(artifacts),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_second_server_on_the_same_folder_exits_naming_folder_and_holder(start_server):
    first = start_server()
    second = _second_server(first.artifacts)
    assert second.returncode != 0
    assert str(first.artifacts.resolve()) in second.stderr
    assert f"pid {first.process.pid} " in second.stderr, second.stderr
    # The first server is untouched and still serves.
    with first.client() as client:
        assert client.get("/health/ready").status_code == 200
        assert client.get("/models").json() == []


def test_the_lock_goes_with_its_holder_even_when_killed(tmp_path):
    artifacts = tmp_path / "artifacts"
    first = ServerProcess(artifacts).start()
    first.process.send_signal(signal.SIGKILL)
    first.process.wait(30)
    # No stale lock: the kernel released it with the process.
    with ServerProcess(artifacts) as again:
        with again.client() as client:
            assert client.get("/health/ready").status_code == 200
        assert _second_server(artifacts).returncode != 0


def test_servers_on_different_folders_run_side_by_side(start_server):
    first, second = start_server(), start_server()
    for server in (first, second):
        with server.client() as client:
            assert client.get("/health/ready").status_code == 200
