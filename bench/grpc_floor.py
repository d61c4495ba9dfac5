"""What grpcio itself costs per image request: the floor under the fronts' gRPC path.

N processes, as many as the server's fronts, share one port (SO_REUSEPORT) and answer
ModelInfer with grpcio's aio server and nothing of this server: `bare` answers a prebuilt
message as large as the request; `copies` adds the two copies a front cannot avoid with grpcio's
Python API (the received bytes into memory the engine can read, and the answer joined into the
bytes grpcio takes, each a 602 KB memcpy). The fronts' CPU per request minus this floor is what
the server's own code on that path costs (parsing, checks, the engine link, the answer's
message); the floor bounds what any change to that code can win.

    from grpc_floor import floor
    load, us = floor("copies", workers=8, x=image, seconds=5, connections=64)

`answer_nbytes` sizes the answer (default: as large as the request; 12 for a classifier-sized
answer of 3 FP32 values).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
MODES = ("bare", "copies")
# ModelInferResponse's model_name "image", then the raw_output_contents tag and its length
# varint for 602,112 bytes: enough of a message for a client that only counts answers.
_HEAD_FIELDS = b"\x0a\x05image"
_RAW_TAG = b"\x32"


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _serve(port: int, mode: str, nbytes: int, answer_nbytes: int, ready) -> None:
    import asyncio

    import grpc

    sys.path.insert(0, str(REPO))
    from service.shared.heap_tuning import keep_freed_pages

    keep_freed_pages()  # as a front does
    head = _HEAD_FIELDS + _RAW_TAG + _varint(answer_nbytes)
    answer = np.zeros(answer_nbytes, np.uint8)  # stands for the engine's output in the arena
    slot = np.zeros(nbytes, np.uint8)  # stands for the request's arena slot
    prebuilt = head + answer.tobytes()

    async def infer(wire: bytes, context) -> bytes:
        if mode == "bare":
            return prebuilt
        slot[...] = np.frombuffer(wire, np.uint8, nbytes, len(wire) - nbytes)
        return b"".join((head, answer))

    async def main() -> None:
        server = grpc.aio.server(
            options=(("grpc.max_receive_message_length", -1), ("grpc.so_reuseport", 1))
        )
        handlers = {"ModelInfer": grpc.unary_unary_rpc_method_handler(infer)}
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("inference.GRPCInferenceService", handlers),)
        )
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        ready.set()
        await server.wait_for_termination()

    import uvloop  # the fronts' loop

    uvloop.install()
    asyncio.run(main())


def cpu_s(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def floor(
    mode: str,
    workers: int,
    x: np.ndarray,
    seconds: float,
    connections: int,
    answer_nbytes: int | None = None,
    processes: int = 4,
    h2load: bool = False,
):
    """(the load measured, the servers' CPU per answered request in us); the load from
    `processes` grpcio clients, or from h2load (bench/h2load_grpc.py) with `h2load`."""
    from bench_workers import grpc_load, image_call
    from h2load_grpc import h2load_grpc
    from support.server import free_port

    port = free_port()
    spawn = multiprocessing.get_context("spawn")
    readies = [spawn.Event() for _ in range(workers)]
    answer = x.nbytes if answer_nbytes is None else answer_nbytes
    servers = [
        spawn.Process(target=_serve, args=(port, mode, x.nbytes, answer, r)) for r in readies
    ]
    for server in servers:
        server.start()
    try:
        for ready in readies:
            ready.wait(60)
        address = f"127.0.0.1:{port}"
        if h2load:
            message = image_call("image", x)
            before = cpu_s([s.pid for s in servers])
            load = h2load_grpc(address, message, seconds, connections, warm_up_s=1.0)
            used = cpu_s([s.pid for s in servers]) - before
            return load, used / max(1, load.rps * (seconds + 1.0)) * 1e6
        grpc_load(address, "image", x, 1, connections, processes=processes)  # warm-up
        before = cpu_s([s.pid for s in servers])
        load = grpc_load(address, "image", x, seconds, connections, processes=processes)
        used = cpu_s([s.pid for s in servers]) - before
        return load, used / max(1, load.rps * seconds) * 1e6
    finally:
        for server in servers:
            server.kill()
            server.join()
