"""Benchmark of dynamic batching over HTTP on a real server.

A weight-bound program (4 x Linear(1024, 1024), batch dim 0 dynamic up to 64) is deployed twice
in one server process: once without configuration (one execute per request) and once with
dynamic batching (max_batch_size 32). The same load, N concurrent connections each sending
batch-1 requests back to back through POST /infer, runs against each in turn. Prints req/s,
p50/p99 latency, the batched/unbatched throughput ratio (goal >= 2x) and the distribution of
rows per execute read from /metrics (etrt_batch_size).

The load comes from wrk (Debian package). The same comparison is made first in-process, straight
through the scheduler (no HTTP, no JSON): when the HTTP path costs more per request than the
execute, it caps both runs and hides what batching gains, so the two figures together tell which
one limits.

usage: python bench/bench_batching.py [--seconds 10] [--connections 32] [--instances 2]
                                      [--delay-us 2000] [--width 1024] [--layers 4]
                                      [--programs-dir DIR]
"""

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from bench_http import Load, Request, wrk  # noqa: E402
from scratch import scratch_dir  # noqa: E402
from support import programs  # noqa: E402
from support.prometheus import parse, series  # noqa: E402
from support.server import ServerProcess, tensor, upload  # noqa: E402

MAX_BATCH = 32


def load(url: str, model: str, width: int, connections: int, seconds: float, scratch: Path) -> Load:
    """`connections` closed loops of batch-1 requests through wrk (a Python client on the same
    cores would cost more per request than the server, and cap both runs)."""
    x = np.random.default_rng(0).standard_normal((1, width)).astype(np.float32)
    body = json.dumps({"model": model, "inputs": [tensor(x)]}).encode()
    result = wrk(url, Request("/infer", body), connections, seconds, scratch)
    if result.failed:
        raise SystemExit(f"{model}: {result.failed} requests failed")
    return result


def in_process(
    exported, config: dict, width: int, instances: int, connections: int, seconds: float
) -> tuple[float, dict]:
    """(req/s, executes per batch size) of closed loops submitting to the scheduler directly."""
    from concurrent.futures import ThreadPoolExecutor

    from service.dataplane.metrics import Metrics
    from service.dataplane.model_pool import ModelPool
    from service.dataplane.scheduler import policy_for
    from service.dataplane.statistics import Statistics
    from service.model_config.parse import parse_model_config
    from service.native_host import import_host
    from service.store.records import ModelDescription, StoredFile, StoredModel

    description = ModelDescription("m", (StoredFile("program.pte", "program", 0, ""),), ())
    stored = StoredModel("m", exported.pte.parent, description)
    x = np.ones((1, width), np.float32)

    async def run() -> tuple[float, dict]:
        with ThreadPoolExecutor(connections) as executor:
            pool = ModelPool(stored, import_host(), instances)
            parsed, problems = parse_model_config(config)
            assert not problems, problems
            statistics = Statistics()
            scheduler = policy_for(parsed)(
                "m", "forward", pool, parsed, executor, Metrics(), statistics, "1"
            )
            done = 0
            end = time.perf_counter() + seconds

            async def connection() -> None:
                nonlocal done
                while time.perf_counter() < end:
                    await scheduler.submit([x])
                    done += 1

            await asyncio.gather(*[connection() for _ in range(connections)])
            await pool.close()
            sizes = statistics.model_stats("m", "1")["batch_stats"]
            return done / seconds, {s["batch_size"]: s["compute_infer"]["count"] for s in sizes}

    return asyncio.run(run())


def batch_distribution(url: str, model: str) -> dict[str, float]:
    """Executes per range of rows, from the cumulative histogram buckets."""
    parsed = parse(httpx.get(f"{url}/metrics").text)
    buckets = sorted(
        (float(dict(labels)["le"]), count)
        for labels, count in series(parsed, "etrt_batch_size_bucket").items()
        if dict(labels)["model"] == model
    )
    shown, previous_bound, previous = {}, 0.0, 0.0
    for bound, cumulative in buckets:
        if cumulative > previous:
            low = int(previous_bound) + 1
            high = "inf" if bound == float("inf") else int(bound)
            shown[str(low) if low == high else f"{low}-{high}"] = cumulative - previous
        previous_bound, previous = bound, cumulative
    return shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--delay-us", type=int, default=2000)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--programs-dir", type=Path)
    args = parser.parse_args()

    work = scratch_dir("bench_batching_")
    exported = programs.export_weight_bound(
        args.programs_dir or work / "programs", args.width, args.layers
    )
    batched = {
        "max_batch_size": MAX_BATCH,
        "dynamic_batching": {"max_queue_delay_microseconds": args.delay_us},
        "instance_group": [{"count": args.instances}],
    }
    print(
        f"{args.layers} x Linear({args.width}, {args.width}), {args.connections} connections "
        f"of batch-1 requests, {args.instances} instances, {args.seconds:g} s each; batched: "
        f"max_batch_size {MAX_BATCH}, max_queue_delay {args.delay_us} us"
    )
    direct = {}
    for name, config in (("unbatched", {}), ("batched", batched)):
        direct[name], sizes = in_process(
            exported, config, args.width, args.instances, args.connections, args.seconds / 2
        )
        print(
            f"in-process {name:10s} {direct[name]:8.1f} req/s   executes by rows: "
            f"{dict(sorted(sizes.items()))}"
        )
    print(
        f"in-process throughput batched / unbatched: {direct['batched'] / direct['unbatched']:.2f}x"
    )
    with ServerProcess(
        work / "artifacts", "--instances", str(args.instances), "--log-level", "warning"
    ) as server:
        with server.client() as client:
            for name, fields in (("unbatched", {}), ("batched", {"config": json.dumps(batched)})):
                response = upload(client, name, exported.pte, fields=fields)
                if response.status_code != 201:
                    raise SystemExit(f"upload {name}: {response.status_code} {response.text}")
        rates = {}
        for name in ("unbatched", "batched"):
            load(server.url, name, args.width, args.connections, 1.0, work)  # warm up
            result = load(server.url, name, args.width, args.connections, args.seconds, work)
            print(f"HTTP {name:10s} {result}")
            rates[name] = result.rps
        print(
            f"HTTP throughput batched / unbatched: {rates['batched'] / rates['unbatched']:.2f}x "
            "(goal >= 2x)"
        )
        for name in ("unbatched", "batched"):
            shown = ", ".join(
                f"{rows}: {int(count)}"
                for rows, count in batch_distribution(server.url, name).items()
            )
            print(f"rows per execute, {name}: {shown}")


if __name__ == "__main__":
    main()
