"""A real `python -m service` process on a free port, for end-to-end tests over HTTP.

The server runs in its own process exactly as users start it, so tests see real startup,
reconciliation, the child-process load check and shutdown, not an in-process shortcut.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    def __init__(
        self,
        artifacts: Path,
        *extra_args: str,
        env: dict | None = None,
        log_path: Path | None = None,
        port_from_env: str | None = None,
    ):
        """port_from_env: the variable ("PORT", "ETRT_PORT") that gives the HTTP port instead of
        --port, as a platform would."""
        self.port_from_env = port_from_env
        self.artifacts = Path(artifacts)
        self.extra_args = list(extra_args)
        self.env = env or {}
        self.log_path = log_path or self.artifacts.parent / f"{self.artifacts.name}-server.log"
        self.port = None
        self.grpc_port = None
        self.process = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def client(self, timeout: float = 120.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)

    def start(self, timeout: float = 60.0) -> ServerProcess:
        self.start_process()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/health/ready", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server not ready within {timeout} s:\n{self.log()}")

    def start_process(self) -> ServerProcess:
        """Starts the process without waiting for it to be ready."""
        self.port = free_port()
        # Every server gets a free gRPC port too: two on the default port would collide.
        self.grpc_port = free_port()
        while self.grpc_port == self.port:
            self.grpc_port = free_port()
        env = dict(os.environ)
        # `service` from the repo and test helpers (backend setup modules) from tests/, ahead of
        # anything inherited, so the process tests the working tree.
        env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO), str(TESTS)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        )
        env.update(self.env)
        port_args = ["--port", str(self.port)]
        if self.port_from_env is not None:
            env[self.port_from_env], port_args = str(self.port), []
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "service",
                "--host",
                "127.0.0.1",
                *port_args,
                "--grpc-port",
                str(self.grpc_port),
                "--artifacts",
                str(self.artifacts),
                *self.extra_args,
            ],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def restart(self) -> ServerProcess:
        self.stop()
        return self.start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-8000:] if self.log_path.exists() else ""

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def upload(
    client: httpx.Client,
    name: str | None,
    program: Path | bytes | None,
    data: list = (),
    program_name: str = "model.pte",
    replace: bool | None = None,
    fields: dict | None = None,
) -> httpx.Response:
    """POST /models. data items: a Path (sent under its own name) or (name, Path | bytes)."""
    files = []
    if program is not None:
        content = program if isinstance(program, bytes) else Path(program).read_bytes()
        files.append(("program", (program_name, content, "application/octet-stream")))
    for item in data:
        file_name, source = (item.name, item) if isinstance(item, Path) else item
        content = source if isinstance(source, bytes) else Path(source).read_bytes()
        files.append(("data", (file_name, content, "application/octet-stream")))
    form = dict(fields or {})
    if name is not None:
        form["name"] = name
    if replace is not None:
        form["replace"] = "true" if replace else "false"
    return client.post("/models", data=form, files=files)


def serving(artifacts: Path, models: dict, *args: str):
    """A started server (`args` its flags) with each of `models` (name -> an exported program,
    with `pte` and `ptds`) uploaded; the caller stops it (a module fixture's teardown)."""
    server = ServerProcess(artifacts, *args).start()
    with server.client() as client:
        for name, program in models.items():
            response = upload(client, name, program.pte, program.ptds)
            assert response.status_code == 201, response.text
    return server


def tensor(array, name: str | None = None, datatype: str | None = None) -> dict:
    """A numpy array or torch tensor as an Open Inference Protocol input."""
    import numpy as np

    array = np.asarray(array.detach().numpy() if hasattr(array, "detach") else array)
    names = {
        "float32": "FP32",
        "float64": "FP64",
        "float16": "FP16",
        "int64": "INT64",
        "int32": "INT32",
        "int8": "INT8",
        "uint8": "UINT8",
        "bool": "BOOL",
        "int16": "INT16",
    }
    body = {
        "shape": list(array.shape),
        "datatype": datatype or names[array.dtype.name],
        "data": array.reshape(-1).tolist(),
    }
    if name is not None:
        body["name"] = name
    return body


def stored_files(artifacts: Path) -> list[str]:
    """Every file under the artifacts root, relative to it (the registry included; not the
    running server's lock file, which holds no model data)."""
    from service.store.lock import LOCK_FILE

    return sorted(
        str(p.relative_to(artifacts))
        for p in Path(artifacts).rglob("*")
        if p.is_file() and str(p.relative_to(artifacts)) != LOCK_FILE
    )


def registry_rows(artifacts: Path) -> list[str]:
    import sqlite3

    with sqlite3.connect(Path(artifacts) / "registry.sqlite3") as db:
        return [row[0] for row in db.execute("SELECT name FROM models ORDER BY name")]
