"""gRPC load from h2load (nghttp2's HTTP/2 benchmark, in C): a client far cheaper per call than
grpcio's Python client, so that on one host the server, not its clients, bounds the load.

grpcio's Python client spends about what grpcio's server does on a 602 KB image call (measured
on a 2-core machine: 1.1-1.3 ms a call against the fronts' 1.1 ms), so with the clients on the
server's host every gRPC figure measured with it is partly the clients'. h2load sends the same
bytes a gRPC client sends (h2c, the message behind gRPC's 5-byte prefix, `content-type:
application/grpc`, `te: trailers`) over one HTTP/2 connection per client, one call at a time.

It sees only HTTP statuses, and a gRPC error is an HTTP 200 with `grpc-status` in its trailers:
callers check the server's own count of answered requests against what h2load counts.

    load = h2load_grpc(address, bench_workers.image_call("image", x), seconds=3, connections=64)
"""

from __future__ import annotations

import re
import resource
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

from bench_http import Load

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


def available() -> bool:
    return shutil.which("h2load") is not None


def _children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def logged_us(log: Path) -> list[int]:
    """The durations in h2load's --log-file, sorted, in microseconds: the measured requests only
    (after the warm-up), one per line as start, status, duration."""
    return sorted(int(line.split("\t")[2]) for line in log.read_text().splitlines() if line)


def h2load_grpc(
    address: str,
    message: bytes,
    seconds: float,
    connections: int,
    threads: int = 4,
    timeout_s: float | None = None,
    warm_up_s: float = 1.0,
) -> Load:
    """Closed-loop ModelInfer calls of `message` for `seconds` after `warm_up_s`; `timeout_s`
    sends a `grpc-timeout` (the call's deadline, never reached). Load.failed counts calls h2load
    saw fail at the HTTP level; Load.client_us is h2load's CPU per call, its warm-up's calls
    taken to go at the measured rate."""
    with tempfile.TemporaryDirectory(prefix="h2load-") as scratch:
        body = Path(scratch) / "call.grpc"
        body.write_bytes(b"\0" + struct.pack(">I", len(message)) + message)
        log = Path(scratch) / "calls.tsv"
        command = [
            "h2load",
            f"--duration={int(seconds * 1000)}ms",  # whole numbers only, hence milliseconds
            f"--warm-up-time={int(warm_up_s * 1000)}ms",
            f"--clients={connections}",
            f"--threads={min(threads, connections)}",
            "--max-concurrent-streams=1",
            f"--data={body}",
            f"--log-file={log}",
            "--header=content-type: application/grpc",
            "--header=te: trailers",
        ]
        if timeout_s is not None:
            command.append(f"--header=grpc-timeout: {int(timeout_s)}S")
        command.append(f"http://{address}{MODEL_INFER}")
        before = _children_cpu_s()
        run = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120)
        client_s = _children_cpu_s() - before
        if run.returncode != 0:
            raise RuntimeError(f"h2load failed ({run.returncode}): {run.stderr[-500:]}")
        summary = r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded"
        done = re.search(summary, run.stdout)
        if done is None:
            raise RuntimeError(f"h2load's summary not found in:\n{run.stdout[-1500:]}")
        finished, succeeded = int(done.group(1)), int(done.group(2))
        took = logged_us(log)
    load = Load(
        succeeded / seconds,
        took[len(took) // 2] / 1e3 if took else 0.0,
        took[int(len(took) * 0.99)] / 1e3 if took else 0.0,
        finished - succeeded,
    )
    load.client_us = client_s / max(1.0, load.rps * (seconds + warm_up_s)) * 1e6
    return load


def answered_ok(metrics_text: str, model: str) -> float:
    """The server's count of requests answered ok for `model` (etrt_inference_requests_total)."""
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith("etrt_inference_requests_total{") and f'model="{model}"' in line:
            if 'outcome="ok"' in line:
                total += float(line.split()[-1])
    return total
