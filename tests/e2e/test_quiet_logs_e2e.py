"""What a server's log says in ordinary operation: nothing that is not news.

A restart over an up-to-date registry says nothing about migrating it; an input a kernel refuses
is one warning line (not ExecuTorch's own error lines besides); the worker processes that decode
large JSON bodies are gone when the server has exited, with no leaked-semaphore warning.
"""

import os
import time
from pathlib import Path

import numpy as np

from support.program_fixtures import image_program, mix_of_ops_program
from support.server import tensor, upload


def _children(pid: int) -> set[int]:
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.update(int(child) for child in text)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text()


def test_a_server_logs_news_only(start_server, mix_of_ops_program, image_program):
    server = start_server()
    with server.client() as client:
        assert upload(client, "mix", mix_of_ops_program.pte).status_code == 201
        assert upload(client, "image", image_program.pte).status_code == 201
    server.restart()  # the registry is at the current schema now
    start = len(server.log_path.read_text())
    with server.client() as client:
        x, _ = mix_of_ops_program.example_inputs
        body = {"model": "mix", "inputs": [tensor(x), tensor(np.array([1, 2, 50]))]}
        response = client.post("/infer", json=body)
        assert response.status_code == 422 and "input.rejected" in response.text
        # Over the inline limit: decoded in a worker process.
        image = np.zeros((1, 3, 224, 224), np.float32)
        response = client.post("/infer", json={"model": "image", "inputs": [tensor(image)]})
        assert response.status_code == 200, response.text
    workers = _children(server.process.pid)
    assert workers  # the JSON workers (and the resource tracker) run beside the server
    server.stop()
    log = server.log_path.read_text()
    assert "registry migrated" not in log
    after = log[start:].splitlines()
    rejected = [line for line in after if "indices_ptr[2] 50" in line]
    assert len(rejected) == 1 and " WARNING " in rejected[0], after
    assert not [line for line in after if line.startswith(("E ", "I ")) or " ERROR " in line]
    assert "leaked semaphore" not in log and "resource_tracker" not in log
    deadline = time.monotonic() + 10  # the resource tracker exits just after the server
    while (alive := [pid for pid in workers if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive, [Path(f"/proc/{p}/cmdline").read_bytes() for p in alive]
