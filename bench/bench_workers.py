"""Multi-process serving: this server with 1 and N protocol fronts against Python floors, one run.

    python bench/bench_workers.py --export DIR              # here: export the programs (torch)
    python bench/bench_workers.py --programs DIR [--workers 8] [--seconds 5] [--sections abcde]

Meant for the 16-core GPU host (issue 15); on a 2-core machine run `--workers 2 --sections a`
(no regression where cores are few). Baselines execute the same programs on this project's
native host (executorch.runtime does not run on the GPU host), each started by this script:
the floor (one raw ASGI route, orjson, execute on the event loop, no validation) in 1 and N
processes (`uvicorn --workers N`), and LitServe with N workers. Load comes from wrk (`-t4`) for
HTTP and from 4 client processes of raw unary calls for gRPC, each connection a channel of its own.

a. tiny program (Linear 8->4 + ReLU, [2, 8] FP32), native JSON /infer, 64 connections;
b. the same over v2 binary, 64 connections;
c. --workers 1 from 8 to 256 connections (does it hold its throughput?), and N fronts at 256;
d. 1x3x224x224 FP32 through x * 2 + 1 over v2 binary and gRPC, 32 connections: request tensor
   bytes per second (--image: the program lowered to XNNPACK, the default, or on portable
   kernels, whose executes take most of the cores);
e. memory of the engine process (the models' host memory) with 1 and N fronts.

Figures move from run to run; the ratios, measured minutes apart in one run, are what to compare.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from bench_http import Baseline, Load, Request, _modules, wrk  # noqa: E402
from scratch import scratch_dir  # noqa: E402
from support import programs  # noqa: E402
from support.processes import role_pids  # noqa: E402
from support.server import ServerProcess, upload  # noqa: E402

IMAGE_SHAPE = (1, 3, 224, 224)
IMAGE_BYTES = int(np.prod(IMAGE_SHAPE)) * 4


def export(out_dir: Path) -> dict:
    """The tiny program of bench_http.py (Linear 8->4 + ReLU) and the image-sized identity."""
    import torch

    torch.manual_seed(0)
    tiny = _modules()[0]
    return {
        "tiny": programs.export_module(out_dir, "bench_tiny_linear8x4", tiny, (torch.randn(2, 8),)),
        "image": programs.export_image(out_dir, xnnpack=True),
        "image_portable": programs.export_image(out_dir),
    }


def tiny_json(model: str) -> Request:
    x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
    body = {
        "model": model,
        "inputs": [{"shape": [2, 8], "datatype": "FP32", "data": x.ravel().tolist()}],
    }
    return Request("/infer", json.dumps(body).encode())


def v2_binary(model: str, x: np.ndarray) -> Request:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "input_0",
                    "datatype": "FP32",
                    "shape": list(x.shape),
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "outputs": [{"name": "output_0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return Request(
        f"/v2/models/{model}/infer",
        header + x.tobytes(),
        "application/octet-stream",
        {"Inference-Header-Content-Length": str(len(header))},
    )


def _grpc_client(
    address: str, body: bytes, seconds: float, connections: int, out, deadline: float | None
) -> None:
    """`connections` channels of one call at a time each. Each channel has a connection of its
    own (a local subchannel pool): channels to one address in a process otherwise share one
    HTTP/2 connection, and the kernel spreads connections, not calls, over the fronts."""
    import asyncio

    import grpc

    async def run():
        options = [("grpc.max_receive_message_length", -1), ("grpc.use_local_subchannel_pool", 1)]
        channels = [grpc.aio.insecure_channel(address, options=options) for _ in range(connections)]
        done, latencies = 0, []
        ends = time.monotonic() + seconds
        cpu_before = time.process_time()  # the load's own, not the process's start

        async def worker(channel):
            nonlocal done
            call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
            while time.monotonic() < ends:
                begun = time.perf_counter()
                await call(body, timeout=deadline)
                latencies.append(time.perf_counter() - begun)
                done += 1

        try:
            await asyncio.gather(*[worker(channel) for channel in channels])
        finally:
            cpu = time.process_time() - cpu_before
            for channel in channels:
                await channel.close()
        out.put((done, latencies, cpu))

    asyncio.run(run())


def servicer_parameter() -> bytes:
    """`method: forward` as a ModelInferRequest's request parameter, to append to a message (as
    protobuf merges fields): the default method, so the same request, but request parameters
    are the servicer's to read, so the fronts' native path leaves the call to it."""
    from service.front.protocols.v2_grpc import messages

    request = messages.ModelInferRequest()
    request.parameters["method"].string_param = "forward"
    return request.SerializeToString()


def image_call(model: str, x: np.ndarray, servicer: bool = False) -> bytes:
    """A ModelInferRequest message: `x` as input_0's raw contents; `servicer`: for the fronts'
    servicer to answer (servicer_parameter)."""
    from service.front.protocols.v2_grpc import messages

    request = messages.ModelInferRequest(model_name=model)
    request.inputs.add(name="input_0", datatype="FP32", shape=list(x.shape))
    request.raw_input_contents.append(x.tobytes())
    return request.SerializeToString() + (servicer_parameter() if servicer else b"")


def grpc_load(
    address: str,
    model: str,
    x: np.ndarray,
    seconds: float,
    connections: int,
    deadline: float | None = None,
    body: bytes | None = None,
    processes: int = 4,
    servicer: bool = False,
) -> Load:
    """Closed-loop ModelInfer calls from `processes` client processes; `deadline`: each call's,
    in seconds (None: none); `body`: the request message (default: `x` as input_0's raw
    contents); `servicer`: sent so that the fronts' servicer answers it (servicer_parameter).
    The clients' CPU per answered call goes in the returned Load's `client_us`: grpcio's client
    costs about what its server does, so on a shared host it bounds the load."""
    body = image_call(model, x) if body is None else body
    if servicer:
        body += servicer_parameter()
    queue = multiprocessing.get_context("spawn").Queue()
    workers = [
        multiprocessing.get_context("spawn").Process(
            target=_grpc_client,
            args=(address, body, seconds, connections // processes, queue, deadline),
        )
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    results = [queue.get() for _ in workers]
    for worker in workers:
        worker.join()
    latencies = sorted(lat for _, lats, _ in results for lat in lats)
    total = sum(done for done, _, _ in results)
    load = Load(
        total / seconds,
        latencies[len(latencies) // 2] * 1e3 if latencies else 0.0,
        latencies[int(len(latencies) * 0.99)] * 1e3 if latencies else 0.0,
        0,
    )
    load.client_us = sum(cpu for _, _, cpu in results) / max(1, total) * 1e6
    return load


class Ours:
    """A real `python -m service --workers N` with the two programs deployed."""

    def __init__(
        self,
        scratch: Path,
        exported: dict,
        workers: int,
        instances: int | None,
        server_args: tuple[str, ...] = (),
        env: dict | None = None,
        config: dict | None = None,
    ):
        """`config`: more of each model's configuration (e.g. `parameters`)."""
        (scratch / f"ours-{workers}").mkdir()
        self.server = ServerProcess(
            scratch / f"ours-{workers}" / "artifacts",
            "--workers",
            str(workers),
            *server_args,
            env=env,
        ).start(timeout=120)
        self.url = self.server.url
        with self.server.client() as client:
            for name, program in exported.items():
                # The floor executes in each of its N processes at once; the engine's way to
                # run N executes of one model at once is N instances of its method (planned
                # memory each, weights and engine shared): as a Triton user would configure it.
                # The same count with 1 and N fronts, so that section e compares like with like.
                # None: no configuration, the server's own instance default.
                configured = dict(config or {})
                if instances is not None:
                    configured["instance_group"] = [{"count": instances}]
                fields = {"config": json.dumps(configured)} if configured else {}
                response = upload(client, name, program.pte, fields=fields)
                assert response.status_code == 201, response.text

    def engine_rss_kib(self) -> dict:
        (engine,) = role_pids(self.server, "engine")
        fields = {}
        for line in Path(f"/proc/{engine}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("RssAnon", "RssFile", "RssShmem"):
                fields[key] = int(rest.split()[0])
        return fields

    def model_memory(self) -> dict:
        """The models' own memory as the engine reports it (/metrics): mapped file pages and
        planned arenas, per model."""
        with self.server.client() as client:
            text = client.get("/metrics").text
        found = {}
        for line in text.splitlines():
            if line.startswith(("etrt_model_resident_bytes{", "etrt_model_planned_arena_bytes{")):
                series, _, value = line.rpartition(" ")
                found[series] = int(float(value))
        return found

    def front_requests(self) -> dict[str, int]:
        """Requests each front has sent to the engine so far (etrt_front_requests_total)."""
        with self.server.client() as client:
            text = client.get("/metrics").text
        found = {}
        for line in text.splitlines():
            if line.startswith("etrt_front_requests_total{"):
                series, _, value = line.rpartition(" ")
                found[series.split('"')[1]] = int(float(value))
        return found

    def cpu_s(self) -> tuple[float, float, float, float, float]:
        """CPU seconds used so far by all fronts together; by the engine's event-loop thread
        (its executes in worker threads are not in it), in user and in kernel mode; by the
        engine's lane threads (one per front, runtime_ext/lane/: they read every front's
        messages and serve small requests themselves); and executing, as the statistics
        extension counts it (every model's compute_infer, wherever it ran)."""
        tick = os.sysconf("SC_CLK_TCK")

        def used(stat: str) -> tuple[float, float]:
            fields = Path(stat).read_text().rpartition(")")[2].split()
            return int(fields[11]) / tick, int(fields[12]) / tick  # utime, stime

        fronts = sum(sum(used(f"/proc/{pid}/stat")) for pid in role_pids(self.server, "front"))
        (engine,) = role_pids(self.server, "engine")
        lanes = 0.0
        for task in Path(f"/proc/{engine}/task").iterdir():
            try:
                if (task / "comm").read_text().startswith("etrt-lane"):
                    lanes += sum(used(str(task / "stat")))
            except OSError:  # a thread that ended meanwhile
                continue
        with self.server.client() as client:
            stats = client.get("/v2/models/stats").json()["model_stats"]
        executing = sum(m["inference_stats"]["compute_infer"]["ns"] for m in stats) / 1e9
        return fronts, *used(f"/proc/{engine}/task/{engine}/stat"), lanes, executing

    def stop(self) -> None:
        self.server.stop()


def _ratio(label: str, ours: float, theirs: float, goal: float | None) -> str:
    ratio = ours / theirs if theirs else float("inf")
    verdict = (
        "" if goal is None else f"  (goal >= {goal:g}x: {'met' if ratio >= goal else 'MISSED'})"
    )
    return f"  {label}: {ratio:.2f}x{verdict}"


def _load(url: str, request: Request, connections: int, seconds: float, scratch: Path) -> Load:
    wrk(url, request, connections, 1, scratch, threads=4)  # warm-up
    return wrk(url, request, connections, seconds, scratch, threads=4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", type=Path, help="export the programs into DIR and stop")
    parser.add_argument("--programs", type=Path, help="programs exported with --export")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--sections", default="abcde")
    parser.add_argument(
        "--instances",
        default=None,
        help="method instances each model is deployed with: a count (default: the fronts' "
        "count, at least 2, as the floor runs one execute per process) or 'auto' (no "
        "configuration: the server's own default, what a user gets)",
    )
    parser.add_argument(
        "--image",
        choices=("xnnpack", "portable"),
        default="xnnpack",
        help="section d's program: x * 2 + 1 lowered to XNNPACK (tens of microseconds per "
        "execute: the bytes' way through the server is what is measured), or on ExecuTorch's "
        "portable kernels (a millisecond or two per execute on the GPU host's CPU)",
    )
    parser.add_argument(
        "--server-args",
        default="",
        help="more flags for this server (not the baselines), one string, e.g. "
        "'--front-nice 0': to see what a setting does to the figures, against a run without",
    )
    args = parser.parse_args()
    if args.export:
        print({name: str(p.pte) for name, p in export(args.export).items()})
        return
    exported = export(args.programs)  # reads what --export wrote
    n, seconds, scratch = (
        args.workers,
        args.seconds,
        scratch_dir("bench-workers-"),
    )
    image_model = "image" if args.image == "xnnpack" else "image_portable"
    tiny_pte, image_pte = exported["tiny"].pte, exported[image_model].pte
    image = np.random.default_rng(0).standard_normal(IMAGE_SHAPE, dtype=np.float32)
    results: dict[str, Load] = {}

    def baseline(label: str, kind: str, pte: Path, request: Request, workers: int, conns: int):
        app = Baseline(kind, pte, request, scratch / f"{label}.log", workers, 60)
        try:
            results[label] = _load(app.url, request, conns, seconds, scratch)
        finally:
            app.stop()
        print(f"  {label:<34} {results[label]}", flush=True)

    def ours(label: str, server: Ours, request: Request, conns: int):
        wrk(server.url, request, conns, 1, scratch, threads=4)  # warm-up
        before, cpu_before = server.front_requests(), server.cpu_s()
        results[label] = wrk(server.url, request, conns, seconds, scratch, threads=4)
        after, cpu_after = server.front_requests(), server.cpu_s()
        shares = sorted(after[f] - before.get(f, 0) for f in after)
        spread = f"  (per front, fewest to most: {shares})" if len(shares) > 1 else ""
        served = max(1, sum(shares))
        fronts_us, user_us, sys_us, lanes_us, execute_us = (
            (b - a) / served * 1e6 for a, b in zip(cpu_before, cpu_after)
        )
        cost = (
            f"  CPU per request: fronts {fronts_us:.0f} us, engine thread {user_us + sys_us:.0f} us"
            f" (user {user_us:.0f}, kernel {sys_us:.0f}), engine lane threads {lanes_us:.0f} us;"
            f" executing {execute_us:.0f} us"
        )
        print(f"  {label:<34} {results[label]}{spread}\n{cost}", flush=True)

    instances = None if args.instances == "auto" else int(args.instances or max(2, n))
    server_args = tuple(shlex.split(args.server_args))
    one = Ours(scratch, exported, 1, instances, server_args)
    many = Ours(scratch, exported, n, instances, server_args) if n > 1 else None
    try:
        if "a" in args.sections:
            print(f"\na. tiny program, native JSON /infer, wrk -t4 -c64, {seconds:g} s each")
            ours("ours --workers 1", one, tiny_json("tiny"), 64)
            if many:
                ours(f"ours --workers {n}", many, tiny_json("tiny"), 64)
            baseline("floor, 1 process", "floor", tiny_pte, tiny_json("m"), 1, 64)
            if n > 1:
                baseline(f"floor, {n} processes", "floor", tiny_pte, tiny_json("m"), n, 64)
                try:
                    # LitServe serves its API at /predict, the same body.
                    lit = Request("/predict", tiny_json("m").body)
                    baseline(f"LitServe, {n} workers", "litserve-host", tiny_pte, lit, n, 64)
                except RuntimeError as exc:
                    log = scratch / f"LitServe, {n} workers.log"
                    tail = log.read_text(errors="replace")[-600:] if log.exists() else ""
                    print(f"  LitServe not run: {exc}\n{tail}")
            r = results
            print(
                _ratio(
                    "--workers 1 / floor 1",
                    r["ours --workers 1"].rps,
                    r["floor, 1 process"].rps,
                    0.5,
                )
            )
            if many:
                w = r[f"ours --workers {n}"].rps
                print(
                    _ratio(
                        f"--workers {n} / --workers 1",
                        w,
                        r["ours --workers 1"].rps,
                        4 if n >= 8 else 0.9,
                    )
                )
                print(_ratio(f"--workers {n} / floor {n}", w, r[f"floor, {n} processes"].rps, 0.25))
                if f"LitServe, {n} workers" in r:
                    print(
                        _ratio(
                            f"--workers {n} / LitServe {n}", w, r[f"LitServe, {n} workers"].rps, 5
                        )
                    )
        if "b" in args.sections:
            x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
            print(f"\nb. tiny program, v2 binary, wrk -t4 -c64, {seconds:g} s each")
            baseline("floor v2 binary, 1 process", "floor", tiny_pte, v2_binary("m", x), 1, 64)
            if n > 1:
                baseline(
                    f"floor v2 binary, {n} processes", "floor", tiny_pte, v2_binary("m", x), n, 64
                )
            ours("ours v2 binary --workers 1", one, v2_binary("tiny", x), 64)
            if many:
                ours(f"ours v2 binary --workers {n}", many, v2_binary("tiny", x), 64)
            r = results
            print(
                _ratio(
                    "--workers 1 / floor 1",
                    r["ours v2 binary --workers 1"].rps,
                    r["floor v2 binary, 1 process"].rps,
                    0.5,
                )
            )
            if many:
                w = r[f"ours v2 binary --workers {n}"].rps
                print(
                    _ratio(
                        f"--workers {n} / --workers 1",
                        w,
                        r["ours v2 binary --workers 1"].rps,
                        4 if n >= 8 else 0.9,
                    )
                )
                print(
                    _ratio(
                        f"--workers {n} / floor {n}",
                        w,
                        r[f"floor v2 binary, {n} processes"].rps,
                        0.25,
                    )
                )
        if "c" in args.sections:
            print(f"\nc. tiny JSON, 8 to 256 connections, {seconds:g} s each")
            for conns in (8, 64, 256):
                ours(f"ours --workers 1, {conns} connections", one, tiny_json("tiny"), conns)
            if many:  # the tail at many connections over all the fronts (issue 36: p99 <= 2 ms)
                ours(f"ours --workers {n}, 256 connections", many, tiny_json("tiny"), 256)
        if "d" in args.sections:
            print(
                f"\nd. 1x3x224x224 FP32 (x * 2 + 1, {args.image}), 32 connections,"
                f" {seconds:g} s each"
            )
            request = v2_binary(image_model, image)
            if n > 1:
                baseline(
                    f"floor image v2 binary, {n} processes",
                    "floor",
                    image_pte,
                    v2_binary("m", image),
                    n,
                    32,
                )
            ours("ours image v2 binary --workers 1", one, request, 32)
            if many:
                ours(f"ours image v2 binary --workers {n}", many, request, 32)
            for label, server in (("1", one), (str(n), many)):
                if server is None:
                    continue
                key = f"ours image gRPC --workers {label}"
                results[key] = grpc_load(server.server.grpc_url, image_model, image, seconds, 32)
                print(f"  {key:<34} {results[key]}", flush=True)
            for key, load in results.items():
                if "image" in key:
                    print(f"  {key}: {load.rps * IMAGE_BYTES / 1e9:.2f} GB/s of request tensors")
            if many:
                r = results
                for proto in ("v2 binary", "gRPC"):
                    print(
                        _ratio(
                            f"{proto} --workers {n} / --workers 1",
                            r[f"ours image {proto} --workers {n}"].rps,
                            r[f"ours image {proto} --workers 1"].rps,
                            4,
                        )
                    )
                print(
                    _ratio(
                        f"v2 binary --workers {n} / floor {n}",
                        r[f"ours image v2 binary --workers {n}"].rps,
                        r[f"floor image v2 binary, {n} processes"].rps,
                        1.0,
                    )
                )
        if "e" in args.sections and many:
            print("\ne. engine process memory (KiB) after the runs above")
            print(f"  --workers 1: {one.engine_rss_kib()}")
            print(f"  --workers {n}: {many.engine_rss_kib()}")
            print("  the models' own memory, bytes (etrt_model_*):")
            mine, theirs = one.model_memory(), many.model_memory()
            for series in sorted(mine):
                print(f"    {series}: {mine[series]} with 1 front, {theirs.get(series)} with {n}")
    finally:
        one.stop()
        if many:
            many.stop()


if __name__ == "__main__":
    main()
