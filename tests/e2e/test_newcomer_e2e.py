"""A newcomer's first day, as the README writes it: a fresh clone of the repository (its committed
state), `bash .ci/install` there alone (pip's own cache reused), `.venv/bin/etrt --help` in that
install, the clone's server started as the README starts it (on free ports), and the README's
and the getting-started page's examples run as written in a folder whose `.venv` is the clone's.

The export block runs with the test install's Python (CI has no separate export environment;
the clone's server install has no torch, by design). The install's time is printed and kept
as a test property (`install_s`): the README quotes it.
"""

import os
import shutil
import signal
import subprocess
import sys
import time

import httpx
import pytest

from support import doc_examples
from support.server import REPO, free_port

pytestmark = pytest.mark.slow  # an install with a native build: minutes
INSTALL_LIMIT_S = 1500


def _plain_env() -> dict:
    """A newcomer's shell: none of the suite's PYTHONPATH or ETRT_* settings."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("ETRT_")}


def test_a_fresh_clone_installs_and_runs_the_first_day(tmp_path, record_property):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=300)
    started = time.monotonic()
    install = subprocess.run(
        ["bash", ".ci/install"],
        cwd=clone,
        env=_plain_env(),
        capture_output=True,
        text=True,
        timeout=INSTALL_LIMIT_S,
    )
    install_s = time.monotonic() - started
    record_property("install_s", round(install_s))
    print(f"bash .ci/install in a fresh clone: {install_s:.0f} s")
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]

    helped = subprocess.run(
        [str(clone / ".venv/bin/etrt"), "--help"],
        env=_plain_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert helped.returncode == 0 and "deploy" in helped.stdout, helped.stdout + helped.stderr

    port, grpc_port = free_port(), free_port()
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(
        [
            str(clone / ".venv/bin/python"),
            "-m",
            "service",
            "--port",
            str(port),
            "--grpc-port",
            str(grpc_port),
        ],
        cwd=clone,
        env=_plain_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and server.poll() is None:
            try:
                if httpx.get(f"{url}/health/ready").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            raise AssertionError((tmp_path / "server.log").read_text())
        for page in (clone / "README.md", clone / "docs" / "getting-started.md"):
            reader = tmp_path / f"reader-{page.stem}"
            reader.mkdir()
            (reader / ".venv").symlink_to(clone / ".venv")
            env = {**_plain_env(), "ETRT_URL": url}
            ran = 0
            for block in doc_examples.blocks(page):
                if not block.runs:
                    continue
                python = sys.executable  # the export needs torch: the test install's
                done = doc_examples.run(block, reader, port, grpc_port, env, python)
                assert done.returncode == 0, (
                    f"{block.line} of {page.name}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
                )
                ran += 1
            assert ran >= 4, page
            shutil.rmtree(reader)
            # the next page starts its first model afresh
            assert httpx.delete(f"{url}/models/mymodel").status_code == 204
    finally:
        server.send_signal(signal.SIGINT)  # Ctrl-C, as the README stops it
        assert server.wait(60) == 0
        log.close()
