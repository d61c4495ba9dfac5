"""Benchmark: an httpx client against one front. httpx (h11), and so KServe's REST client, writes
a request's head and its body in two writes; the front holds a head read alone for its body and
offers the two to the native path (service/front/protocols/bodies.py: body_to_come). One
sequential client posts a small v2 JSON request to the linear program, alternating the plain URL
(the native path's) and the same URL with `?path=python` (uvicorn and the ASGI route, the
baseline in the same run); prints req/s, the front's CPU per request (from /proc) and the share
the native path took (etrt_front_native_requests_total).

usage: python bench/bench_httpx_client.py [--requests 2000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from grpc_floor import cpu_s  # noqa: E402
from scratch import scratch_dir  # noqa: E402
from support import programs  # noqa: E402
from support.processes import role_pids  # noqa: E402
from support.prometheus import parse, series  # noqa: E402
from support.server import ServerProcess, upload  # noqa: E402

URL = "/v2/models/lin/infer"


def _native(server) -> float:
    with server.client() as client:
        text = client.get("/metrics").text
    return sum(series(parse(text), "etrt_front_native_requests_total").values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    scratch = scratch_dir("bench-httpx-")
    program = programs.export_linear_relu(scratch / "programs")
    with ServerProcess(scratch / "artifacts", "--workers", "1") as server:
        with server.client() as client:
            assert upload(client, "lin", program.pte).status_code == 201
        x = program.example_inputs[0].numpy()
        tensor = {"name": "input_0", "shape": list(x.shape), "datatype": "FP32"}
        body = json.dumps({"inputs": [{**tensor, "data": x.ravel().tolist()}]}).encode()
        headers = {"content-type": "application/json"}
        (front,) = role_pids(server, "front")
        print(f"httpx, one sequential client, {args.requests} requests a run, one front")
        with httpx.Client(base_url=server.url) as client:
            for _ in range(args.rounds):
                for label, query in (("native path", ""), ("Python path", "?path=python")):
                    for _ in range(200):  # warm-up
                        client.post(URL + query, content=body, headers=headers)
                    time.sleep(1.5)  # the fronts report their counts every half second
                    native_before, cpu_before = _native(server), cpu_s([front])
                    begun = time.perf_counter()
                    for _ in range(args.requests):
                        answer = client.post(URL + query, content=body, headers=headers)
                        assert answer.status_code == 200, answer.text
                    took = time.perf_counter() - begun
                    cpu_us = (cpu_s([front]) - cpu_before) / args.requests * 1e6
                    time.sleep(1.5)
                    share = (_native(server) - native_before) / args.requests
                    print(
                        f"  {label:<12} {args.requests / took:8.0f} req/s  front {cpu_us:4.0f} us"
                        f" a request  native share {share:.2f}",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
