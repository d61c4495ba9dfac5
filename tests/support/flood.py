"""A mixed-protocol flood against a real server: closed loops over native JSON `/infer`, v2 REST
JSON, v2 REST binary and gRPC, each protocol in a process of its own, for the overload e2e test
and bench/bench_flood.py.

The clients must cost the 2-core test machine as little as possible, or the figures measure
them: requests are serialized once, HTTP is spoken over raw keep-alive streams and gRPC through
a bare channel with bytes in and out. A refused request (503 / UNAVAILABLE) is sent again at
once unless `honor_retry_after`, as an impatient client would: the worst case for the server.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import queue
import time
from dataclasses import dataclass, field

import numpy as np

PROTOCOLS = ("native JSON", "v2 JSON", "v2 binary", "gRPC")
# Probes a flood may run beside its protocols: one keep-alive connection each, asking every
# PROBE_EVERY_S, its latencies measured (they must not wait behind inference work).
PROBES = ("GET /v2/health/ready", "GET /metrics")
PROBE_EVERY_S = 0.02
INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"


@dataclass
class Outcome:
    """What one protocol's connections saw during the flood."""

    protocol: str
    ok: int = 0
    refused: int = 0  # 503 / UNAVAILABLE
    other: dict = field(default_factory=dict)  # any other status -> count
    latencies_s: list = field(default_factory=list)  # of the successes
    retry_after_s: list = field(default_factory=list)  # every Retry-After seen on a 503

    @property
    def server_errors(self) -> int:
        return sum(n for status, n in self.other.items() if str(status).startswith("5"))


def _http_requests(model: str, x: np.ndarray) -> dict[str, bytes]:
    """The raw HTTP/1.1 request of each HTTP protocol for input `x`."""
    data = x.reshape(-1).tolist()
    tensor = {"name": "input_0", "shape": list(x.shape), "datatype": "FP32"}
    native = json.dumps({"model": model, "inputs": [{**tensor, "data": data}]}).encode()
    v2_json = json.dumps({"inputs": [{**tensor, "data": data}]}).encode()
    header = json.dumps(
        {
            "inputs": [{**tensor, "parameters": {"binary_data_size": x.nbytes}}],
            "outputs": [{"name": "output_0", "parameters": {"binary_data": True}}],
        }
    ).encode()

    def request(path: str, body: bytes, extra: str = "") -> bytes:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: flood\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n"
        )
        return head.encode() + body

    v2_path = f"/v2/models/{model}/infer"
    return {
        "native JSON": request("/infer", native),
        "v2 JSON": request(v2_path, v2_json),
        "v2 binary": request(
            v2_path,
            header + x.tobytes(),
            f"Inference-Header-Content-Length: {len(header)}\r\n",
        ),
    }


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length")
    if length is None:
        raise RuntimeError(f"an answer without Content-Length: {head!r}")
    await reader.readexactly(int(length))
    return status, headers


async def _http_loop(port, request, outcome, until, honor, started):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started.append(1)
    try:
        while time.perf_counter() < until:
            begun = time.perf_counter()
            writer.write(request)
            status, headers = await _read_response(reader)
            if status == 200:
                outcome.ok += 1
                outcome.latencies_s.append(time.perf_counter() - begun)
                continue
            if status == 503:
                outcome.refused += 1
                retry = float(headers.get("retry-after", "nan"))
                outcome.retry_after_s.append(retry)
                if honor and retry == retry:
                    await asyncio.sleep(min(retry, max(0.0, until - time.perf_counter())))
            else:
                outcome.other[status] = outcome.other.get(status, 0) + 1
            if headers.get("connection", "").lower() == "close":
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
    finally:
        writer.close()


async def _probe_loop(port, probe, outcome, until, started):
    """GETs the probe's path every PROBE_EVERY_S over one keep-alive connection."""
    path = probe.split(" ", 1)[1]
    request = f"GET {path} HTTP/1.1\r\nHost: flood\r\n\r\n".encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started.append(1)
    try:
        while time.perf_counter() < until:
            begun = time.perf_counter()
            writer.write(request)
            status, _ = await _read_response(reader)
            if status == 200:
                outcome.ok += 1
                outcome.latencies_s.append(time.perf_counter() - begun)
            else:
                outcome.other[status] = outcome.other.get(status, 0) + 1
            await asyncio.sleep(PROBE_EVERY_S)
    finally:
        writer.close()


def _grpc_request(model: str, x: np.ndarray) -> bytes:
    # The server's own message classes: the same wire format as tritonclient's, and present on
    # a host that has only the server (bench_flood on the GPU host).
    from service.front.protocols.v2_grpc import messages

    request = messages.ModelInferRequest(model_name=model)
    request.inputs.add(name="input_0", datatype="FP32", shape=list(x.shape))
    request.raw_input_contents.append(x.tobytes())
    return request.SerializeToString()


async def _grpc_loops(address, body, outcome, until, honor, connections, started):
    import grpc

    async def loop(channel):
        call = channel.unary_unary(INFER_METHOD)  # bytes in, bytes out
        started.append(1)
        while time.perf_counter() < until:
            begun = time.perf_counter()
            try:
                await call(body, timeout=60)
                outcome.ok += 1
                outcome.latencies_s.append(time.perf_counter() - begun)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNAVAILABLE:
                    outcome.refused += 1
                    trailers = dict(exc.trailing_metadata() or ())
                    retry = float(trailers.get("retry-after", "nan"))
                    outcome.retry_after_s.append(retry)
                    if honor and retry == retry:
                        await asyncio.sleep(min(retry, max(0.0, until - time.perf_counter())))
                else:
                    name = exc.code().name
                    outcome.other[name] = outcome.other.get(name, 0) + 1

    # One channel (one HTTP/2 connection) per loop, as separate clients would have.
    channels = [grpc.aio.insecure_channel(address) for _ in range(connections)]
    try:
        await asyncio.gather(*[loop(channel) for channel in channels])
    finally:
        for channel in channels:
            await channel.close()


def _client(
    protocol, http_port, grpc_address, model, x, seconds, connections, honor, start_at, nice, out
):
    """One protocol's connections, in a process of its own; puts its Outcome on `out`. A probe
    is never niced: it measures the server, not its own wait for a CPU."""
    if protocol not in PROBES:
        os.nice(nice)

    async def main():
        outcome = Outcome(protocol)
        started: list = []
        await asyncio.sleep(max(0.0, start_at - time.time()))  # every protocol starts at once
        until = time.perf_counter() + seconds
        if protocol in PROBES:
            await _probe_loop(http_port, protocol, outcome, until, started)
        elif protocol == "gRPC":
            body = _grpc_request(model, x)
            await _grpc_loops(grpc_address, body, outcome, until, honor, connections, started)
        else:
            request = _http_requests(model, x)[protocol]
            await asyncio.gather(
                *[
                    _http_loop(http_port, request, outcome, until, honor, started)
                    for _ in range(connections)
                ]
            )
        return outcome

    out.put(asyncio.run(main()))


def flood(
    http_port: int,
    grpc_address: str,
    model: str,
    x: np.ndarray,
    seconds: float,
    connections: int = 16,
    protocols: tuple[str, ...] = PROTOCOLS,
    honor_retry_after: bool = False,
    nice: int = 0,
    probes: tuple[str, ...] = (),
) -> dict[str, Outcome]:
    """Runs `connections` closed loops per protocol for `seconds`, all protocols at once, and
    each of `probes` (PROBES) beside them; their Outcomes are keyed by protocol or probe."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    start_at = time.time() + 3.0  # room for the processes to start
    workers = [
        context.Process(
            target=_client,
            args=(p, http_port, grpc_address, model, x, seconds, connections, honor_retry_after)
            + (start_at, nice, out),
        )
        for p in (*protocols, *probes)
    ]
    for worker in workers:
        worker.start()
    outcomes = {}
    deadline = time.monotonic() + seconds + 120
    while len(outcomes) < len(workers):
        try:
            outcome = out.get(timeout=1.0)
        except queue.Empty:
            failed = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                raise RuntimeError(f"a flood client failed (exit codes {failed})") from None
            continue
        outcomes[outcome.protocol] = outcome
    for worker in workers:
        worker.join(30)
    return {p: outcomes[p] for p in (*protocols, *probes)}


def sequential(http_port: int, model: str, x: np.ndarray, seconds: float) -> list[float]:
    """Latencies of one client sending native JSON requests one after another: the baseline."""

    async def main():
        outcome = Outcome("native JSON")
        until = time.perf_counter() + seconds
        request = _http_requests(model, x)["native JSON"]
        await _http_loop(http_port, request, outcome, until, False, [])
        if outcome.refused or outcome.other:
            raise RuntimeError(f"the sequential client was refused: {outcome}")
        return outcome.latencies_s

    return asyncio.run(main())
