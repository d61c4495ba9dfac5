"""Benchmark: overload from every protocol at once. A mixed flood (native JSON `/infer`, v2 REST
JSON, v2 REST binary, gRPC; `--connections` closed loops each, refused requests sent again at
once) against one model method with a bounded queue and a measurable execute time, next to one
sequential client in the same run.

Prints per protocol the successes, 503s and their share of the successes; the flood's goodput as
a ratio of the sequential client's rate (goal: >= 1.1 on 2 cores, issue 34); p50/p99 of the
successes against the bound of (queue length / instances + 1) x execute time; the Retry-After values
the 503s named; and p50/p99 of `/v2/health/ready` and `/metrics`, each asked every 20 ms on a
connection of its own during the flood (goal: p99 <= 50 ms: they never wait behind inference).

With one instance (the default, `--instances 1`) the flood can at best keep that instance busy,
which one sequential client nearly does already when the execute is long beside its round trip:
the goodput ratio is then bound by (execute + round trip) / execute. `--instances 0` deploys
with the server's own default (two for a program this size), which a flood can keep busy at once.

usage: python bench/bench_flood.py [--seconds 10] [--connections 16] [--max-queue 8]
       [--instances 1] [--workers 1] [--front-nice N] [--honor-retry-after] [--width 2048]
       [--layers 4] [--programs-dir DIR] [--export-only]

The program (`--layers` x Linear(`--width`, `--width`), 4 x width^2 x layers bytes of weights) is
exported into `--programs-dir` once and read from there afterwards without torch or the
exporter: export it here with `--export-only`, then run the bench on a host that has only the
server (e.g. `--width 1024 --layers 8`, 32 MiB, for a host reached with a 64 MiB carry).
"""

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from scratch import scratch_dir  # noqa: E402
from support import programs  # noqa: E402 (torch only when it exports)
from support.flood import PROBES, PROTOCOLS, flood, sequential  # noqa: E402
from support.processes import role_pids  # noqa: E402
from support.server import ServerProcess, upload  # noqa: E402

MODEL = "flood"
# 4 x Linear(2048, 2048) by default: about 10 ms per execute on one core here


def _program(directory: Path, width: int, layers: int) -> programs.ExportedProgram:
    """The exported program in `directory`, exporting it only if it is not there yet."""
    written = programs.exported_files(directory / f"weight_bound_{width}_{layers}")
    return written or programs.export_weight_bound(directory, width, layers)


def _stats(client) -> dict:
    return client.get(f"/v2/models/{MODEL}/stats").json()["model_stats"][0]["inference_stats"]


def _cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes have used so far."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _mean_s(before: dict, after: dict, phase: str) -> float:
    """Mean seconds of a phase of the requests the engine ran between two readings."""
    count = after[phase]["count"] - before[phase]["count"]
    return (after[phase]["ns"] - before[phase]["ns"]) / max(count, 1) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=16, help="per protocol")
    parser.add_argument("--max-queue", type=int, default=8)
    parser.add_argument(
        "--instances", type=int, default=1, help="of the method; 0: the server's default"
    )
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--honor-retry-after", action="store_true")
    parser.add_argument("--client-nice", type=int, default=0)
    parser.add_argument("--front-nice", type=int, default=None, help="the server's --front-nice")
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--programs-dir", type=Path, default=None)
    parser.add_argument("--export-only", action="store_true", help="export the program and stop")
    args = parser.parse_args()
    scratch = scratch_dir("bench-flood-")
    program = _program(args.programs_dir or scratch / "programs", args.width, args.layers)
    if args.export_only:
        print(f"exported {program.pte} and {[str(p) for p in program.ptds]}")
        return
    config = {"dynamic_batching": {"default_queue_policy": {"max_queue_size": args.max_queue}}}
    if args.instances:
        config["instance_group"] = [{"count": args.instances}]
    x = np.random.default_rng(0).standard_normal((1, args.width)).astype(np.float32)
    nice = () if args.front_nice is None else ("--front-nice", str(args.front_nice))
    server = ServerProcess(
        scratch / "artifacts", "--log-level", "warning", "--workers", str(args.workers), *nice
    )
    with server:
        with server.client() as client:
            created = upload(
                client, MODEL, program.pte, program.ptds, fields={"config": json.dumps(config)}
            )
            assert created.status_code == 201, created.text
            sequential(server.port, MODEL, x, 1.0)  # first executes
            alone = sequential(server.port, MODEL, x, args.seconds)
            found = client.get(f"/v2/models/{MODEL}/config").json().get("instance_group") or []
            instances = sum(group.get("count", 1) for group in found) or 1
            before = _stats(client)
            roles = {role: role_pids(server, role) for role in ("engine", "front")}
            cpu_before = {role: _cpu_s(pids) for role, pids in roles.items()}
            outcomes = flood(
                server.port,
                server.grpc_url,
                MODEL,
                x,
                args.seconds,
                args.connections,
                honor_retry_after=args.honor_retry_after,
                nice=args.client_nice,
                probes=PROBES,
            )
            cpu = {role: _cpu_s(pids) - cpu_before[role] for role, pids in roles.items()}
            after = _stats(client)
    probed = {name: outcomes.pop(name) for name in PROBES}
    execute_s = _mean_s(before, after, "compute_infer")
    queue_s = _mean_s(before, after, "queue")
    alone_rate = len(alone) / args.seconds
    ok = sum(o.ok for o in outcomes.values())
    goodput = ok / args.seconds
    print(
        f"one sequential client (native JSON): {alone_rate:.1f} req/s, "
        f"p50 {np.percentile(alone, 50) * 1e3:.1f} ms"
    )
    print(
        f"flood: {args.connections} connections x {len(PROTOCOLS)} protocols, "
        f"max_queue_size {args.max_queue}, {instances} instance(s),"
        f" {args.layers} x Linear({args.width}, "
        f"{args.width}), {args.workers} front(s), {args.seconds:g} s"
        + (", clients honor Retry-After" if args.honor_retry_after else "")
        + f"; in the engine meanwhile: execute {execute_s * 1e3:.1f} ms, "
        f"queued {queue_s * 1e3:.1f} ms per request"
    )
    print(
        f"{'protocol':<12} {'ok':>7} {'503':>8} {'other':>6} {'share':>6} "
        f"{'p50 ms':>7} {'p99 ms':>7}"
    )
    for name, o in outcomes.items():
        p50, p99 = np.percentile(o.latencies_s, [50, 99]) * 1e3 if o.latencies_s else (0, 0)
        print(
            f"{name:<12} {o.ok:>7} {o.refused:>8} {sum(o.other.values()):>6} "
            f"{o.ok / max(ok, 1):>6.2f} {p50:>7.1f} {p99:>7.1f}"
        )
    every = np.concatenate([o.latencies_s for o in outcomes.values() if o.latencies_s])
    # Each instance takes its share of the queue; the last in it waits for its share to run.
    bound_ms = (args.max_queue / instances + 1) * execute_s * 1e3
    retries = [r for o in outcomes.values() for r in o.retry_after_s]
    print(
        f"goodput {goodput:.1f} req/s = {goodput / alone_rate:.2f}x one client (goal >= 1.1); "
        f"p50 {np.percentile(every, 50) * 1e3:.1f} ms, p99 {np.percentile(every, 99) * 1e3:.1f} ms "
        f"(queue bound (max_queue_size / instances + 1) x execute = {bound_ms:.1f} ms)"
    )
    if retries:
        values, counts = np.unique(retries, return_counts=True)
        print("Retry-After on 503s: " + ", ".join(f"{v:g} s x {c}" for v, c in zip(values, counts)))
    for name, o in probed.items():
        p50, p99 = np.percentile(o.latencies_s, [50, 99]) * 1e3 if o.latencies_s else (0, 0)
        print(
            f"{name} during the flood: {o.ok} answered, p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
            f"max {max(o.latencies_s, default=0) * 1e3:.1f} ms (goal p99 <= 50 ms)"
            + (f", other answers {o.other}" if o.other else "")
        )
    answered = ok + sum(o.refused for o in outcomes.values())
    print(
        "server CPU during the flood (its clients' 3 s start included): "
        + ", ".join(
            f"{role} {seconds:.1f} s ({seconds / max(answered, 1) * 1e6:.0f} us per answer)"
            for role, seconds in cpu.items()
        )
        + f" over {answered} answers"
    )
    others = {name: o.other for name, o in outcomes.items() if o.other}
    if others:
        print(f"other answers: {others}")


if __name__ == "__main__":
    main()
