"""`etrt serve` as the getting-started page runs it: its log names the server's own PID and how
to stop it, and Ctrl-C (SIGINT to the terminal's whole foreground process group) stops the
supervisor, the engine and the fronts, with status 0."""

import os
import re
import signal
import subprocess
import time

import httpx

from support.cli import ETRT, etrt_env
from support.server import free_port


def test_etrt_serve_names_its_pid_and_stops_on_ctrl_c(tmp_path):
    port, grpc_port = free_port(), free_port()
    log_path = tmp_path / "serve.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [
                str(ETRT),
                "serve",
                "--port",
                str(port),
                "--grpc-port",
                str(grpc_port),
                "--artifacts",
                str(tmp_path / "artifacts"),
                "--workers",
                "2",
            ],
            env=etrt_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a group of its own, as a terminal's foreground job
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health/ready").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            raise AssertionError(log_path.read_text())
        said = re.search(
            r"server pid (\d+): stop it with Ctrl-C or `kill (\d+)`", log_path.read_text()
        )
        assert said, log_path.read_text()
        assert int(said.group(1)) == int(said.group(2)) == process.pid
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C sends
        assert process.wait(60) == 0, log_path.read_text()
        time.sleep(0.5)
        try:
            os.killpg(process.pid, 0)
            remaining = subprocess.run(
                ["pgrep", "-g", str(process.pid)], capture_output=True, text=True
            ).stdout
        except ProcessLookupError:
            remaining = ""
        assert remaining == "", f"processes of the server left: {remaining}"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
