"""Request memory against a real server process: what a request costs grows with what it keeps,
not with the size of what it sends (issue 20).

Peaks are the kernel's own high-water mark of resident memory (VmHWM), reset before each
measurement through /proc/<pid>/clear_refs, so a short spike between two samples is not missed.
"""

import base64
import os
from pathlib import Path

import httpx

from support.program_fixtures import linear_relu_program  # noqa: F401

MiB = 1 << 20


def _status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if value.strip().endswith("kB"):
            fields[key] = int(value.split()[0]) * 1024
    return fields


def _reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _load_body(program: bytes, weights_size: int):
    """A repository load body, generated as it is sent: the test holds no copy of it."""
    yield b'{"parameters": {"file:1/model.pte": "' + base64.b64encode(program) + b'", '
    yield b'"file:1/weights.ptd": "'
    block = os.urandom(3 * MiB)
    for _ in range(weights_size // len(block)):
        yield base64.b64encode(block)
    yield b'"}}'


def test_a_150_mb_repository_load_peaks_under_100_mib_above_baseline(
    shared_server, linear_relu_program
):
    pid = shared_server.process.pid
    weights = 150 * 1000 * 1000 // (3 * MiB) * (3 * MiB)
    with httpx.Client(base_url=shared_server.url, timeout=300) as client:
        # Warm the route once, so that first-use allocations are not counted.
        client.post("/v2/repository/models/warm/load", content=b'{"parameters": {}}')
        baseline = _status(pid)["VmRSS"]
        _reset_peak(pid)
        answer = client.post(
            "/v2/repository/models/big/load",
            content=_load_body(linear_relu_program.pte.read_bytes(), weights),
        )
        peak = _status(pid)["VmHWM"]
    # Random bytes are no flat-tensor file: ingest refuses them, after they were all received.
    assert 400 <= answer.status_code < 500, answer.text
    assert answer.json()["problems"], answer.text
    assert weights > 140 * MiB
    assert peak - baseline < 100 * MiB, (
        f"peak {peak / MiB:.0f} MiB, baseline {baseline / MiB:.0f} MiB"
    )
