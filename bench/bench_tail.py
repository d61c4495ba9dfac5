"""Benchmark: where the tail at many connections comes from. Tiny JSON `/infer` through a server
with its defaults (`--workers 8`, instances automatic), `wrk -t4 -c256` per variant; per run
req/s, p50/p75/p90/p99, p99.9 and the slowest request (wrk's Lua `done`), the requests each front
took, and for each role (the fronts, the engine's threads by name, wrk) the cores it used, the
time its threads waited in the CPU's run queue and their involuntary switches
(/proc/PID/task/TID/schedstat and status), sampled from the run's second second to its last but
one. Issue 36's goal: p99 <= 2 ms at 256 connections with the defaults, on the 16-core host.

    python bench/bench_workers.py --export DIR          # here: the tiny program (torch)
    python bench/bench_tail.py --programs DIR [--variants ":4,:4"] [--seconds 8]

`--h2load` adds the same load from h2load after each wrk run (its per-request log gives the
percentiles outright), and every run prints its mean against Little's law (the connections over
the rate): on the VM hosts of 12-05 wrk reported p99 66-206 ms at 290-630k req/s, which Little's
law at p50 0.4-0.8 ms does not allow, so the client's figures are checked before the server's.

A variant is `SERVER FLAGS:WRK THREADS`; consecutive variants with the same flags share one
server, the first on it fresh (started and measured at once, as a client that opens its pool
the moment the server says ready), the next ones warm. E.g. ":4,:4,--front-nice 0:4,:8".
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench_workers import Ours, export, tiny_json  # noqa: E402
from h2load_grpc import logged_us  # noqa: E402
from scratch import scratch_dir  # noqa: E402
from support.processes import role_pids  # noqa: E402

CONNECTIONS = 256


def _threads(pid: int) -> dict:
    """(pid, tid) -> (name, run ns, run-queue wait ns, involuntary, voluntary switches)."""
    found = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        task = Path(f"/proc/{pid}/task/{tid}")
        try:
            name = (task / "comm").read_text().strip()
            run, wait, _ = (int(v) for v in (task / "schedstat").read_text().split())
            status = (task / "status").read_text()
        except (OSError, ValueError):
            continue
        involuntary = int(re.search(r"nonvoluntary_ctxt_switches:\s+(\d+)", status).group(1))
        voluntary = int(re.search(r"\nvoluntary_ctxt_switches:\s+(\d+)", status).group(1))
        found[(pid, tid)] = (name, run, wait, involuntary, voluntary)
    return found


def _snapshot(roles: dict[str, list[int]]) -> dict:
    return {
        role: {key: seen for pid in pids for key, seen in _threads(pid).items()}
        for role, pids in roles.items()
    }


def _rows(before: dict, after: dict, span_s: float) -> list[str]:
    """Per role and thread name (the engine's Python threads each on their own), what it used."""
    rows = []
    for role, threads in after.items():
        groups = defaultdict(lambda: [0, 0, 0, 0, 0])
        for key, (name, run, wait, involuntary, voluntary) in threads.items():
            if key not in before[role]:
                continue
            _, run0, wait0, involuntary0, voluntary0 = before[role][key]
            label = f"{role}:{name[:12]}"
            if role == "engine" and name.startswith("python"):
                label += f":{key[1]}"
            group = groups[label]
            group[0] += 1
            group[1] += run - run0
            group[2] += wait - wait0
            group[3] += involuntary - involuntary0
            group[4] += voluntary - voluntary0
        for label, (count, run, wait, involuntary, voluntary) in sorted(groups.items()):
            if run < 0.01 * span_s * 1e9:
                continue  # idle
            rows.append(
                f"    {label:<28} x{count:<3} {run / span_s / 1e9:5.2f} cores, run-queue wait "
                f"{wait / max(run, 1):.2f} of that, switches {involuntary / span_s:7.0f}/s "
                f"involuntary, {voluntary / span_s:7.0f}/s voluntary"
            )
    return rows


def _ms(text: str) -> float:
    """wrk's duration ("412.00us", "1.63ms", "2.01s") in ms."""
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()
    return float(number) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[unit]


def _script(scratch: Path, body: bytes, content_type: str) -> Path:
    path = scratch / "body.bin"
    path.write_bytes(body)
    script = scratch / "tail.lua"
    script.write_text(
        f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "{content_type}"\n'
        f'local f = io.open("{path}", "rb")\nwrk.body = f:read("*a")\nf:close()\n'
        "done = function(summary, latency, requests)\n"
        '  io.write(string.format("TAIL %.0f %.0f\\n", latency:percentile(99.9), latency.max))\n'
        "end\n"
    )
    return script


def _run(server: Ours, threads: int, seconds: int, scratch: Path) -> str:
    request = tiny_json("tiny")
    script = _script(scratch, request.body, request.content_type)
    roles = {role: role_pids(server.server, role) for role in ("front", "engine")}
    before_fronts = server.front_requests()
    wrk = subprocess.Popen(
        ["wrk", f"-t{threads}", f"-c{CONNECTIONS}", f"-d{seconds}s", "--latency", "-s",
         str(script), server.url + request.path],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    time.sleep(1.0)
    roles["wrk"] = [wrk.pid]
    first, started = _snapshot(roles), time.monotonic()
    time.sleep(seconds - 2.0)
    last, span = _snapshot(roles), time.monotonic() - started
    out = wrk.communicate()[0]
    time.sleep(1.0)  # the fronts' counts reach the engine every half second
    after_fronts = server.front_requests()
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    quantiles = ", ".join(f"p{q} {v}" for q, v in re.findall(r"\s(50|75|90|99)%\s+(\S+)", out))
    p999, most = (float(v) / 1e3 for v in re.search(r"TAIL (\S+) (\S+)", out).groups())
    mean, spread = (_ms(v) for v in re.search(r"Latency\s+(\S+)\s+(\S+)", out).groups())
    shares = sorted(after_fronts[f] - before_fronts.get(f, 0) for f in after_fronts)
    lines = [
        f"  {rps:,.0f} req/s, {quantiles}, p99.9 {p999:.2f}ms, slowest {most:.2f}ms",
        # One request in flight per connection: the mean latency is the connections over the
        # rate (Little's law). wrk's own mean, and its percentiles, should agree with it.
        f"  mean {mean:.2f}ms (sd {spread:.2f}ms); {CONNECTIONS} connections at this rate:"
        f" {CONNECTIONS / rps * 1e3:.2f}ms",
        f"  requests per front, fewest to most: {shares}",
        *_rows(first, last, span),
    ]
    return "\n".join(lines)


def _h2load(server: Ours, threads: int, seconds: int, scratch: Path) -> str:
    """The same load from h2load (HTTP/1.1, one request in flight per connection), a second
    client whose per-request log gives the distribution outright: where wrk's percentiles and
    its rate disagree (Little's law), this one says which to believe."""
    request = tiny_json("tiny")
    body = scratch / "h2load-body.bin"
    body.write_bytes(request.body)
    log = scratch / "h2load.tsv"
    log.unlink(missing_ok=True)  # h2load appends: a run on a warm server read the fresh one's too
    command = [
        "h2load", "--h1", f"--duration={seconds}s", "--warm-up-time=1s",
        f"--clients={CONNECTIONS}", f"--threads={threads}", f"--data={body}",
        f"--header=content-type: {request.content_type}", f"--log-file={log}",
        server.url + request.path,
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60)
    took = logged_us(log)
    if run.returncode != 0 or not took:
        return f"  h2load failed ({run.returncode}): {run.stderr[-300:]}"
    rps = len(took) / seconds
    mean = sum(took) / len(took) / 1e3

    def q(share: float) -> str:
        return f"{took[min(len(took) - 1, int(len(took) * share))] / 1e3:.2f}ms"

    return (
        f"  h2load -t{threads}: {rps:,.0f} req/s, p50 {q(0.5)}, p90 {q(0.9)}, p99 {q(0.99)},"
        f" p99.9 {q(0.999)}, slowest {took[-1] / 1e3:.2f}ms; mean {mean:.2f}ms,"
        f" {CONNECTIONS} connections at this rate: {CONNECTIONS / rps * 1e3:.2f}ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=Path, required=True, help="bench_workers.py --export")
    parser.add_argument("--variants", default=":4,:4", help="'SERVER FLAGS:WRK THREADS', ...")
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument(
        "--h2load", action="store_true", help="after each wrk run, the same load from h2load"
    )
    args = parser.parse_args()
    exported = export(args.programs)
    scratch = scratch_dir("bench-tail-")
    print(f"{os.cpu_count()} cores, load {os.getloadavg()}, wrk -c{CONNECTIONS}, {args.seconds} s")
    server, flags_now = None, None
    try:
        for variant in args.variants.split(","):
            flags, _, threads = variant.rpartition(":")
            fresh = server is None or flags != flags_now
            if fresh:
                if server is not None:
                    server.stop()
                home = scratch / f"server-{len(os.listdir(scratch))}"
                home.mkdir()
                server = Ours(
                    home, {"tiny": exported["tiny"]}, args.workers, None, tuple(shlex.split(flags))
                )
                flags_now = flags
            state = "fresh" if fresh else "warm"
            print(f"\nserver '{flags}' ({state}), wrk -t{threads}:", flush=True)
            print(_run(server, int(threads), args.seconds, scratch), flush=True)
            if args.h2load:
                print(_h2load(server, int(threads), args.seconds, scratch), flush=True)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
