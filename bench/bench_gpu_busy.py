"""Does the server keep a GPU busy? A TensorRT-delegated add whose every execute is a CUDA kernel
of known duration (the spin provider, tests/support/spin_engine_provider.py, standing in for a
TensorRT engine that fills the GPU: its launches cannot overlap), driven by wrk over v2 binary
and over system and CUDA shared memory, at batch 1 and with dynamic batching (max 32).

    python bench/bench_gpu_busy.py --trt-programs DIR [--workers 8] [--seconds 5]
        [--spin-us 200] [--row-us 10] [--connections 64,256] [--modes binary,system,cuda]
        [--instances 4] [--batched-instances 4]

`--cuda-graphs on` (or `both`: each batch-1 case twice, without and with) deploys the batch-1
models with `use_cuda_graphs`: the delegate captures the kernel once per instance and replays it
from C++, with no provider call and no GIL (batched models change shape, so they never replay).
The kernels number their own records, so replays are counted like launches.

Each model has 4 instances by default (`--instances`, `--batched-instances`), so that a launch
is always queued behind the one running: with 2, a batch's turnaround (its outputs back, the next
batch formed and launched) must fit in the other instance's one kernel.

For each case it prints req/s (wrk -t4), the CPU per request of the fronts and of the engine's
event-loop thread (where batches are formed and answered), the GPU busy fraction two ways --
from the kernels' own records (the union of their start-to-end intervals on the GPU's clock over
the span they cover) and NVML's utilization (nvidia-ml-py when importable, else `nvidia-smi`
sampled every 100 ms) -- the mean kernel time, launches/s and rows per launch, and rows/s
against the kernel-bound limit: the rows a GPU running these kernels back to back would take
per second (rows per launch / kernel time, at the configured time; batch 1: 1e6 / spin_us
rows/s).

Goals (issue 31): batch 1, 64 connections, 8 fronts: busy >= 90 % over v2 binary, >= 95 % with
shared memory; dynamic batching at 256 connections: rows/s >= 0.9x the kernel-bound limit.
Needs a GPU host with cupy, wrk on PATH, and DIR from `cd tests && python -m
support.trt_programs DIR` (trt_spin_add_a256_dynamic*.pte). `--backend` runs the same load on
another backend setup: `support.test_backend_setup:install_spin_backend_on_host` is the spin
provider's CPU proxy (a simulated device running one launch at a time, records on the host's
clock), to measure the scheduler on a machine without a GPU; NVML figures are then absent.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from bench_http import Request, wrk  # noqa: E402
from scratch import scratch_dir  # noqa: E402
from support.processes import role_pids  # noqa: E402
from support.server import ServerProcess, upload  # noqa: E402

SPIN_BACKEND = "support.test_backend_setup:install_spin_backend_on_cuda"
ROW = 64  # FP32 values per row of the spin programs (trt_models.MODELS["spin_add"])
ROW_BYTES = ROW * 4
MAX_BATCH = 32


@dataclass
class Model:
    name: str
    planned: bool  # inputs planned (binary, system shm) or unplanned (CUDA shm)
    batched: bool
    graphs: bool = False  # use_cuda_graphs: replays launched by the delegate, no provider call


def _config(model: Model, instances: int) -> dict:
    # Several executes in flight, so that a launch is always queued behind the one running.
    if not model.batched:
        config = {"instance_group": [{"count": instances}]}
        if model.graphs:
            config["parameters"] = {"use_cuda_graphs": {"string_value": "true"}}
        return config
    return {
        "max_batch_size": MAX_BATCH,
        "dynamic_batching": {"preferred_batch_size": [MAX_BATCH]},
        "instance_group": [{"count": instances}],
    }


def cpu_s(server) -> tuple[float, float]:
    """CPU seconds used so far by all fronts together, and by the engine's event-loop thread
    (where batches are formed and answered; its executes run in worker threads)."""
    tick = os.sysconf("SC_CLK_TCK")

    def used(stat: str) -> float:
        fields = Path(stat).read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / tick  # utime + stime

    fronts = sum(used(f"/proc/{pid}/stat") for pid in role_pids(server, "front"))
    (engine,) = role_pids(server, "engine")
    return fronts, used(f"/proc/{engine}/task/{engine}/stat")


class GpuSampler:
    """NVML's utilization.gpu (percent) sampled while a load runs."""

    def __init__(self):
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._smi: subprocess.Popen | None = None

    def start(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)

            def sample():
                while not self._stop.wait(0.1):
                    self.samples.append(float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))

            self._thread = threading.Thread(target=sample, daemon=True)
            self._thread.start()
        except Exception:  # no nvidia-ml-py here: nvidia-smi's loop
            query = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
            try:
                self._smi = subprocess.Popen(
                    [*query, "-lms", "100"], stdout=subprocess.PIPE, text=True
                )
            except OSError:
                return
            self._thread = threading.Thread(target=self._read_smi, daemon=True)
            self._thread.start()

    def _read_smi(self) -> None:
        for line in self._smi.stdout:
            if self._stop.is_set():
                return
            if line.strip().isdigit():
                self.samples.append(float(line))

    def stop(self) -> float | None:
        self._stop.set()
        if self._smi is not None:
            self._smi.terminate()
            self._smi.wait()
        if self._thread is not None:
            self._thread.join(timeout=2)
        # the first and last samples straddle the load's edges
        inner = self.samples[1:-1] if len(self.samples) > 3 else self.samples
        return sum(inner) / len(inner) if inner else None


class Kernels:
    """The spin provider's records of its launches (spin_engine_provider.spin_records)."""

    def __init__(self, path: Path):
        from support.spin_engine_provider import spin_records

        self.records = spin_records(str(path))

    def count(self) -> int:
        return int(self.records[0])

    def between(self, first: int, last: int) -> dict | None:
        """Busy fraction, mean kernel us, mean rows, rows/s over the launches [first, last)."""
        from support.spin_engine_provider import RING

        if last - first < 2:
            return None
        at = np.arange(first, last) % RING
        rows = self.records[1:].reshape(RING, 3)[at].astype(np.int64)
        rows = rows[rows[:, 1] > 0]  # written (a launch still queued has not yet)
        if len(rows) < 2:
            return None
        rows = rows[np.argsort(rows[:, 0])]
        start, end = rows[:, 0], rows[:, 1]
        span = end.max() - start.min()
        union, reach = 0, start[0]
        for s, e in zip(start, end, strict=True):
            s = max(s, reach)
            if e > s:
                union += e - s
                reach = e
        return {
            "busy": union / span,
            "kernel_us": float(np.mean(end - start)) / 1e3,
            "rows": float(np.mean(rows[:, 2])),
            "rows_per_s": float(rows[:, 2].sum()) / (span / 1e9),
            "launches": len(rows),
            "span_s": span / 1e9,
        }


def _names(client: httpx.Client, model: str) -> tuple[list[str], str]:
    metadata = client.get(f"/v2/models/{model}").json()
    return [i["name"] for i in metadata["inputs"]], metadata["outputs"][0]["name"]


def binary_request(model: str, inputs: list[str], output: str) -> Request:
    x = np.arange(ROW, dtype=np.float32).reshape(1, ROW)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": n,
                    "datatype": "FP32",
                    "shape": [1, ROW],
                    "parameters": {"binary_data_size": ROW_BYTES},
                }
                for n in inputs
            ],
            "outputs": [{"name": output, "parameters": {"binary_data": True}}],
        }
    ).encode()
    return Request(
        f"/v2/models/{model}/infer",
        header + x.tobytes() * len(inputs),
        "application/octet-stream",
        {"Inference-Header-Content-Length": str(len(header))},
    )


def shm_request(model: str, inputs: list[str], output: str, region: str) -> Request:
    """Inputs at 0, 256, ..., the output after them, all in `region` (every connection the
    same: the inputs are only read, and each output written is the same values)."""

    def ref(i: int) -> dict:
        return {
            "shared_memory_region": region,
            "shared_memory_byte_size": ROW_BYTES,
            "shared_memory_offset": i * ROW_BYTES,
        }

    body = {
        "inputs": [
            {"name": n, "datatype": "FP32", "shape": [1, ROW], "parameters": ref(i)}
            for i, n in enumerate(inputs)
        ],
        "outputs": [{"name": output, "parameters": ref(len(inputs))}],
    }
    return Request(f"/v2/models/{model}/infer", json.dumps(body).encode())


class Regions:
    """A system and a CUDA region holding the inputs, registered with the server."""

    SIZE = 4 * ROW_BYTES

    def __init__(self, client: httpx.Client, cuda: bool):
        from multiprocessing import shared_memory

        x = np.arange(ROW, dtype=np.float32)
        self.system_name = f"busy_{uuid.uuid4().hex[:8]}"
        self._system = shared_memory.SharedMemory(self.system_name, create=True, size=self.SIZE)
        view = np.frombuffer(self._system.buf, np.float32)
        view[: 2 * ROW] = np.tile(x, 2)
        registered = client.post(
            f"/v2/systemsharedmemory/region/{self.system_name}/register",
            json={"key": f"/{self.system_name}", "offset": 0, "byte_size": self.SIZE},
        )
        assert registered.status_code == 200, registered.text
        self.cuda_name = None
        if cuda:  # its own allocation (a pool's block would open at the pool's base)
            import base64

            import cupy

            runtime = cupy.cuda.runtime
            host = np.concatenate([np.tile(x, 2), np.zeros(2 * ROW, np.float32)])
            self._device = runtime.malloc(self.SIZE)
            runtime.memcpy(self._device, host.ctypes.data, host.nbytes, runtime.memcpyHostToDevice)
            handle = runtime.ipcGetMemHandle(self._device)
            self.cuda_name = f"busy_cuda_{uuid.uuid4().hex[:8]}"
            registered = client.post(
                f"/v2/cudasharedmemory/region/{self.cuda_name}/register",
                json={
                    "raw_handle": {"b64": base64.b64encode(bytes(handle)).decode()},
                    "device_id": 0,
                    "byte_size": self.SIZE,
                },
            )
            assert registered.status_code == 200, registered.text

    def close(self) -> None:
        self._system.close()
        self._system.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trt-programs", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--spin-us", type=float, default=200.0)
    parser.add_argument("--row-us", type=float, default=10.0, help="kernel time per row")
    parser.add_argument("--connections", default="64,256")
    parser.add_argument("--modes", default="binary,system,cuda")
    parser.add_argument("--batching", default="1,32", help="1: batch 1; 32: dynamic batching")
    parser.add_argument("--backend", default=SPIN_BACKEND, help="backend setup of the server")
    parser.add_argument("--instances", type=int, default=4, help="of the batch-1 models")
    parser.add_argument(
        "--batched-instances", type=int, default=4, help="of the dynamic-batching models"
    )
    parser.add_argument(
        "--cuda-graphs",
        choices=("off", "on", "both"),
        default="off",
        help="the batch-1 models with use_cuda_graphs (replays need no provider call, no GIL)",
    )
    args = parser.parse_args()
    from support.trt_models import TrtProgram

    modes = args.modes.split(",")
    scratch = scratch_dir("bench-gpu-busy-")
    # On tmpfs: Linux pins a file's pages for the GPU (the kernels write there) only on shmem.
    stats = scratch_dir("bench-gpu-busy-", "/dev/shm") / "spin-records"
    env = {
        "ETRT_TEST_SPIN_US": str(args.spin_us),
        "ETRT_TEST_SPIN_ROW_US": str(args.row_us),
        "ETRT_TEST_SPIN_STATS": str(stats),
    }
    graphs = {"off": (False,), "on": (True,), "both": (False, True)}[args.cuda_graphs]
    models = []
    for batching in args.batching.split(","):
        batched = batching != "1"
        for planned in (True, False):
            for replayed in (False,) if batched else graphs:
                if planned or "cuda" in modes:
                    name = f"spin{'_batched' if batched else ''}{'' if planned else '_unplanned'}"
                    name += "_graphs" if replayed else ""
                    models.append(Model(name, planned, batched, replayed))
    flags = ["--workers", str(args.workers), "--allow-client-shm", "--log-level", "warning"]
    rows_out = []
    with ServerProcess(
        scratch / "artifacts", *flags, "--backend-setup", args.backend, env=env
    ) as s:
        with s.client() as client:
            for model in models:
                program = TrtProgram.at(
                    args.trt_programs, "spin_add", 256, planned_inputs=model.planned, dynamic=True
                )
                if not program.exists():
                    raise SystemExit(f"{program.pte} is missing: see --help")
                count = args.batched_instances if model.batched else args.instances
                fields = {"config": json.dumps(_config(model, count))}
                response = upload(client, model.name, program.pte, fields=fields)
                assert response.status_code == 201, response.text
            regions = Regions(client, "cuda" in modes)
            kernels = Kernels(stats)  # the spin provider and its CPU proxy write records
            try:
                for model in models:
                    inputs, output = _names(client, model.name)
                    for mode in modes:
                        if (mode == "cuda") == model.planned:
                            continue  # CUDA shm on the unplanned program, the rest on planned
                        if mode == "binary":
                            request = binary_request(model.name, inputs, output)
                        else:
                            region = regions.system_name if mode == "system" else regions.cuda_name
                            request = shm_request(model.name, inputs, output, region)
                        probe = client.post(
                            request.path,
                            content=request.body,
                            headers={"content-type": request.content_type, **request.headers},
                        )
                        if probe.status_code != 200:
                            print(f"  {model.name} {mode}: {probe.status_code} {probe.text[:300]}")
                            continue
                        for conns in (int(c) for c in args.connections.split(",")):
                            wrk(s.url, request, conns, 1, scratch, threads=4)  # warm-up
                            first = kernels.count()
                            sampler = GpuSampler()
                            sampler.start()
                            before = cpu_s(s)
                            load = wrk(s.url, request, conns, args.seconds, scratch, threads=4)
                            after = cpu_s(s)
                            nvml = sampler.stop()
                            served = max(1, load.rps * args.seconds)
                            cpu = [(b - a) / served * 1e6 for a, b in zip(before, after)]
                            time.sleep(0.2)  # the last launches' records land
                            seen = kernels.between(first, kernels.count())
                            rows_out.append((model, mode, conns, load, nvml, seen))
                            print(_row(model, mode, conns, load, nvml, seen, cpu, args), flush=True)
            finally:
                regions.close()
    print(_summary(rows_out, args))


def _limit(rows: float, args) -> float:
    """Rows per second of back-to-back kernels of `rows` rows, at the configured time (with no
    configured time, `--spin-us 0 --row-us 0`, the kernels bound nothing: infinite)."""
    kernel_us = args.spin_us + args.row_us * rows
    return rows / (kernel_us / 1e6) if kernel_us > 0 else math.inf


def _row(model, mode, conns, load, nvml, seen, cpu, args) -> str:
    text = f"  {model.name:<24} {mode:<7} {conns:>4} conns: {load}"
    text += f"  CPU per request: fronts {cpu[0]:.0f} us, engine thread {cpu[1]:.0f} us"
    if nvml is not None:
        text += f"  NVML {nvml:.0f} %"
    if seen is not None:
        limit = _limit(MAX_BATCH if model.batched else 1, args)
        text += (
            f"  kernels busy {seen['busy'] * 100:.1f} %, {seen['kernel_us']:.0f} us,"
            f" {seen['launches'] / seen['span_s']:.0f} launches/s,"
            f" {seen['rows']:.1f} rows/launch, {seen['rows_per_s']:.0f} rows/s ="
            f" {seen['rows_per_s'] / limit:.2f}x the kernel-bound {limit:.0f}"
        )
    return text


def _summary(rows, args) -> str:
    lines = [f"\ngoals ({args.workers} fronts, {args.spin_us:g} us kernel):"]
    for model, mode, conns, load, _, seen in rows:
        if seen is None:
            continue
        if not model.batched and conns == 64:
            goal = 0.90 if mode == "binary" else 0.95
            met = "met" if seen["busy"] >= goal else "MISSED"
            label = f"batch 1{' graphs' if model.graphs else ''} {mode}"
            lines.append(f"  {label} 64 conns: busy {seen['busy']:.3f} >= {goal}: {met}")
        if model.batched and conns == 256:
            # at full batches: requests' rows / s against the limit at 32 rows
            ratio = load.rps / _limit(MAX_BATCH, args)
            met = "met" if ratio >= 0.9 else "MISSED"
            lines.append(f"  batching {mode} 256 conns: {ratio:.2f}x kernel-bound >= 0.9: {met}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
