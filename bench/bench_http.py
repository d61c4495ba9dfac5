"""HTTP serving speed of this server against a bare Starlette app and LitServe, in one run.

    python bench/bench_http.py [--seconds 10] [--programs-dir DIR]

Needs `wrk` (Debian package) and the test extra (torch, to export the programs) plus litserve.
Starts a real `python -m service` with three deployed programs, and, one after the other, the
baselines of bench/http_baseline_apps.py; loads each with `wrk -t1` and prints req/s, p50, p99
and the ratios against the goals of issue 10:

1. tiny program (Linear 8->4 + ReLU, [2, 8] FP32 JSON), 8 connections: this server vs the
   one-route Starlette app (goal >= 0.8x) and vs LitServe with one worker (goal >= 5x);
2. image-sized input (1x3x224x224 FP32, a small conv program): each of this server's encodings
   (IMAGE_ENCODINGS) vs LitServe with JSON (goal >= 5x for the best);
3. per-request server overhead: p50 latency with one connection minus the bare execute of the
   same program on the native host in this process;
4. a CPU-heavy program, 2 connections vs 1 (goal >= 1.7x; the server runs 2 instances).

Figures from a shared 2-core machine are noisy (wrk, the server and its workers share the two
cores); the ratios, measured minutes apart in the same run, are what to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from scratch import scratch_dir  # noqa: E402
from support import programs  # noqa: E402
from support.server import ServerProcess, free_port, tensor, upload  # noqa: E402

APPS = REPO / "bench" / "http_baseline_apps.py"
HEAVY_ROUNDS, HEAVY_SIZE = 100, 16384


@dataclass
class Request:
    path: str
    body: bytes
    content_type: str = "application/json"
    headers: dict = field(default_factory=dict)


@dataclass
class Load:
    rps: float
    p50_ms: float
    p99_ms: float
    failed: int
    client_us: float | None = None  # the load's own CPU per request, where it measures it

    def __str__(self) -> str:
        failed = f", {self.failed} FAILED" if self.failed else ""
        return (
            f"{self.rps:9.1f} req/s  p50 {self.p50_ms:7.2f} ms  p99 {self.p99_ms:7.2f} ms{failed}"
        )


def _modules():
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(8, 4)

        def forward(self, x):
            return torch.relu(self.linear(x))

    class SmallConv(torch.nn.Module):
        """Patchify convolution, ReLU, global mean: microseconds of compute on a 224x224 image,
        so the figures are about moving the tensor, not about convolution kernels."""

        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, kernel_size=4, stride=4)

        def forward(self, x):
            return torch.relu(self.conv(x)).mean(dim=(2, 3))

    return Tiny(), SmallConv()


# export_all's folder of each small program under its out_dir (bench_ray_serve.py --programs
# reads them back without torch).
FOLDERS = {"tiny": "bench_tiny_linear8x4", "conv": "bench_small_conv_224"}


def export_all(out_dir: Path) -> dict:
    import torch

    torch.manual_seed(0)
    tiny, conv = _modules()
    return {
        "tiny": programs.export_module(out_dir, FOLDERS["tiny"], tiny, (torch.randn(2, 8),)),
        "conv": programs.export_module(
            out_dir, FOLDERS["conv"], conv, (torch.randn(1, 3, 224, 224),)
        ),
        "heavy": programs.export_cpu_heavy(out_dir, rounds=HEAVY_ROUNDS, size=HEAVY_SIZE),
    }


def bare_execute_seconds(pte: Path, x: np.ndarray, seconds: float = 1.0) -> float:
    """Mean time of one execute on the native host the server uses, best of 3."""
    import ethost

    method = ethost.Program(str(pte)).load_method("forward")
    for _ in range(20):
        method.execute([x])
    best = float("inf")
    for _ in range(3):
        calls, begun = 0, time.perf_counter()
        while time.perf_counter() - begun < seconds / 3:
            method.execute([x])
            calls += 1
        best = min(best, (time.perf_counter() - begun) / calls)
    return best


def native_json(model: str, x: np.ndarray) -> Request:
    return Request("/infer", json.dumps({"model": model, "inputs": [tensor(x)]}).encode())


def native_json_image(x: np.ndarray) -> Request:
    return native_json("conv", x)


def v2_json(model: str, x: np.ndarray) -> Request:
    body = {
        "inputs": [
            {
                "name": "input_0",
                "shape": list(x.shape),
                "datatype": "FP32",
                "data": x.ravel().tolist(),
            }
        ]
    }
    return Request(f"/v2/models/{model}/infer", json.dumps(body).encode())


def v2_json_image(x: np.ndarray) -> Request:
    return v2_json("conv", x)


def v2_binary_image(x: np.ndarray) -> Request:
    """The binary tensor extension both ways: the image after a JSON header, the answer too."""
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "input_0",
                    "shape": list(x.shape),
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "outputs": [{"name": "output_0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return Request(
        "/v2/models/conv/infer",
        header + x.tobytes(),
        "application/octet-stream",
        {"Inference-Header-Content-Length": str(len(header))},
    )


# This server's encodings of the image request: label -> builder.
IMAGE_ENCODINGS = {
    "native JSON": native_json_image,
    "v2 JSON": v2_json_image,
    "v2 binary": v2_binary_image,
}


def _milliseconds(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]


def wrk(
    url: str,
    request: Request,
    connections: int,
    seconds: float,
    scratch: Path,
    threads: int = 1,
) -> Load:
    body_file = scratch / f"body-{abs(hash(request.body))}.bin"
    body_file.write_bytes(request.body)
    lines = [
        'wrk.method = "POST"',
        f'wrk.headers["Content-Type"] = "{request.content_type}"',
        f'local f = io.open("{body_file}", "rb")',
        "wrk.body = f:read('*a')",
        "f:close()",
    ]
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in request.headers.items()]
    script = scratch / "post.lua"
    script.write_text("\n".join(lines) + "\n")
    result = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--latency",
            "-s",
            str(script),
            url + request.path,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    out = result.stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = _milliseconds(re.search(r"\s50%\s+(\S+)", out).group(1))
    p99 = _milliseconds(re.search(r"\s99%\s+(\S+)", out).group(1))
    failed = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*?timeout (\d+)", out)
    return Load(
        rps,
        p50,
        p99,
        (int(failed.group(1)) if failed else 0) + (int(errors.group(1)) if errors else 0),
    )


class Baseline:
    """One of http_baseline_apps.py in its own process, ready once it answers `request`."""

    def __init__(
        self,
        kind: str,
        pte: Path,
        request: Request,
        log: Path,
        workers: int = 1,
        ready_within_s: float = 180,
    ):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, str(APPS), kind, str(pte), str(self.port), str(workers)]
        with open(log, "ab") as out:
            # A session of its own, so stop() ends the workers it starts (LitServe's, uvicorn's).
            self.process = subprocess.Popen(command, stdout=out, stderr=out, start_new_session=True)
        deadline = time.monotonic() + ready_within_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{kind} exited; see {log}")
            try:
                answer = httpx.post(
                    self.url + request.path,
                    content=request.body,
                    timeout=5,
                    headers={"content-type": request.content_type, **request.headers},
                )
                if answer.status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{kind} not ready; see {log}")

    def stop(self) -> None:
        """Ends the baseline and every process it started (its process group)."""
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            pass
        try:  # whatever outlived the leader, or the leader itself
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()


def _ratio(name: str, ours: float, theirs: float, goal: float) -> str:
    ratio = ours / theirs
    return f"  {name}: {ratio:.2f}x (goal >= {goal}x: {'met' if ratio >= goal else 'NOT met'})"


def _baseline_load(kind: str, pte: Path, request: Request, seconds: float, scratch: Path) -> Load:
    baseline = Baseline(kind, pte, request, scratch / f"{kind}.log")
    try:
        wrk(baseline.url, request, 8, 2, scratch)  # warm-up
        return wrk(baseline.url, request, 8, seconds, scratch)
    finally:
        baseline.stop()


def tiny_section(
    server, exported, tiny: Request, tiny_x: np.ndarray, seconds: float, scratch: Path
) -> None:
    print(f"\n1. tiny program, [2, 8] FP32 JSON, wrk -t1 -c8, {seconds:g} s each")
    wrk(server.url, tiny, 8, 2, scratch)  # warm-up
    ours = wrk(server.url, tiny, 8, seconds, scratch)
    print(f"  this server        {ours}")
    starlette = _baseline_load("starlette", exported["tiny"].pte, tiny, seconds, scratch)
    print(f"  Starlette baseline {starlette}")
    litserve = _baseline_load(
        "litserve", exported["tiny"].pte, Request("/predict", tiny.body), seconds, scratch
    )
    print(f"  LitServe (1 worker){litserve}")
    print(_ratio("vs Starlette", ours.rps, starlette.rps, 0.8))
    print(_ratio("vs LitServe", ours.rps, litserve.rps, 5))
    v2 = wrk(server.url, v2_json("tiny", tiny_x), 8, seconds, scratch)
    print(
        f"  the same over v2 JSON (/v2/models/tiny/infer): {v2}  "
        f"({v2.rps / ours.rps:.2f}x native /infer)"
    )


def image_section(server, exported, image_x: np.ndarray, seconds: float, scratch: Path) -> None:
    print(f"\n2. image-sized input, 1x3x224x224 FP32, wrk -t1 -c8, {seconds:g} s each")
    best = 0.0
    for label, build in IMAGE_ENCODINGS.items():
        request = build(image_x)
        wrk(server.url, request, 8, 2, scratch)
        load = wrk(server.url, request, 8, seconds, scratch)
        best = max(best, load.rps)
        print(f"  this server, {label:12s} {load}  ({len(request.body) / 1e6:.2f} MB body)")
    litserve = _baseline_load(
        "litserve",
        exported["conv"].pte,
        Request("/predict", native_json_image(image_x).body),
        seconds,
        scratch,
    )
    print(f"  LitServe, JSON            {litserve}")
    print(_ratio("best encoding vs LitServe JSON", best, litserve.rps, 5))


def overhead_section(
    server, bare, tiny: Request, image_x: np.ndarray, seconds: float, scratch: Path
) -> None:
    print("\n3. per-request server overhead above the bare execute (wrk -t1 -c1, p50)")
    for label, request, program in (
        ("tiny", tiny, "tiny"),
        ("image, native JSON", native_json_image(image_x), "conv"),
        ("image, v2 binary", v2_binary_image(image_x), "conv"),
    ):
        load = wrk(server.url, request, 1, seconds / 2, scratch)
        overhead = load.p50_ms - bare[program] * 1e3
        print(
            f"  {label:18s} {load}  overhead {overhead:.3f} ms "
            f"(bare execute {bare[program] * 1e3:.3f} ms)"
        )


def heavy_section(server, bare, heavy: Request, seconds: float, scratch: Path) -> None:
    print(f"\n4. CPU-heavy program (bare execute {bare['heavy'] * 1e3:.1f} ms), {seconds:g} s each")
    one = wrk(server.url, heavy, 1, seconds, scratch)
    two = wrk(server.url, heavy, 2, seconds, scratch)
    print(f"  1 connection   {one}\n  2 connections  {two}")
    print(_ratio("2 concurrent vs 1", two.rps, one.rps, 1.7))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="wrk duration per run")
    parser.add_argument("--programs-dir", type=Path, default=None)
    parser.add_argument(
        "--sections", default="1234", help="which of the sections 1-4 to run (default: all)"
    )
    args = parser.parse_args()
    scratch = scratch_dir("bench-http-")
    exported = export_all(args.programs_dir or scratch / "programs")
    rng = np.random.default_rng(0)
    tiny_x = rng.standard_normal((2, 8)).astype(np.float32)
    image_x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    heavy_x = rng.standard_normal(HEAVY_SIZE).astype(np.float32)
    bare = {
        "tiny": bare_execute_seconds(exported["tiny"].pte, tiny_x),
        "conv": bare_execute_seconds(exported["conv"].pte, image_x),
        "heavy": bare_execute_seconds(exported["heavy"].pte, heavy_x),
    }
    print(
        f"bare execute on the native host: tiny {bare['tiny'] * 1e6:.1f} us, conv "
        f"{bare['conv'] * 1e6:.1f} us, heavy {bare['heavy'] * 1e3:.2f} ms"
    )
    tiny, heavy = native_json("tiny", tiny_x), native_json("heavy", heavy_x)
    with ServerProcess(scratch / "artifacts", log_path=scratch / "server.log") as server:
        with server.client() as client:
            for name, program in exported.items():
                response = upload(client, name, program.pte, program.ptds)
                assert response.status_code == 201, response.text
            for request in (tiny, heavy, *(build(image_x) for build in IMAGE_ENCODINGS.values())):
                answer = client.post(
                    request.path,
                    content=request.body,
                    headers={"content-type": request.content_type, **request.headers},
                )
                assert answer.status_code == 200, answer.text
        if "1" in args.sections:
            tiny_section(server, exported, tiny, tiny_x, args.seconds, scratch)
        if "2" in args.sections:
            image_section(server, exported, image_x, args.seconds, scratch)
        if "3" in args.sections:
            overhead_section(server, bare, tiny, image_x, args.seconds, scratch)
        if "4" in args.sections:
            heavy_section(server, bare, heavy, args.seconds, scratch)


if __name__ == "__main__":
    main()
