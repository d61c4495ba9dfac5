"""Benchmark: an image-sized request (1x3x224x224 FP32, the x * 2 + 1 program) with its input
and output in system shared memory, against v2 REST binary tensors and gRPC raw contents, in
the same run against the same server; sequential (one client) and 16 concurrent clients (one
process each, each with its own regions). Prints req/s, p50 and p99, and each mode's
throughput as a ratio of v2 binary's.

`--cuda` (the H200): the input and output in CUDA shared memory (regions exported by each
client with cuda-python), the input on a 256-byte boundary and 16 bytes off one, against v2
binary, with the copies the engine counted (etrt_shm_copies_total).

usage: python bench/bench_shm.py [--seconds 5] [--clients 16] [--workers 1] [--cuda]
                                 [--programs-dir DIR]
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import multiprocessing
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import programs  # noqa: E402
from support.server import ServerProcess, upload  # noqa: E402

IMAGE = (1, 3, 224, 224)
NBYTES = int(np.prod(IMAGE)) * 4
MODEL = "image"


class CudaRegion:
    """A device allocation and its IPC handle, exported as a client would (cuda-python)."""

    def __init__(self, nbytes: int):
        from cuda.bindings import runtime as rt

        self.rt = rt
        self.pointer = int(self._ok(rt.cudaMalloc(nbytes)))
        handle = self._ok(rt.cudaIpcGetMemHandle(self.pointer))
        self.raw_handle = bytes((ctypes.c_char * 64).from_address(handle.getPtr()))

    def _ok(self, result):
        err, *values = result
        if err != self.rt.cudaError_t.cudaSuccess:
            raise SystemExit(f"CUDA: {err}")
        return values[0] if values else None

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        kind = self.rt.cudaMemcpyKind.cudaMemcpyDefault
        self._ok(self.rt.cudaMemcpy(dst, src, nbytes, kind))


def _client_mode(mode: str, url: str, grpc_url: str, x: np.ndarray):
    """(call, check, cleanup) for one client of `mode`."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    tag = uuid.uuid4().hex[:8]
    if mode == "grpc":
        client = grpcclient.InferenceServerClient(grpc_url)
        tensor = grpcclient.InferInput("input_0", list(IMAGE), "FP32")
        tensor.set_data_from_numpy(x)

        def call():
            return client.infer(MODEL, [tensor]).as_numpy("output_0")

        return call, call, client.close
    client = httpclient.InferenceServerClient(url, concurrency=1)
    tensor = httpclient.InferInput("input_0", list(IMAGE), "FP32")
    output = httpclient.InferRequestedOutput("output_0", binary_data=True)
    if mode == "binary":
        tensor.set_data_from_numpy(x, binary_data=True)

        def call():
            return client.infer(MODEL, [tensor], outputs=[output]).as_numpy("output_0")

        return call, call, client.close
    if mode == "system shm":
        import tritonclient.utils.shared_memory as shm

        name = f"bench_{tag}"
        handle = shm.create_shared_memory_region(name, f"/{name}", 2 * NBYTES)
        shm.set_shared_memory_region(handle, [x])
        client.register_system_shared_memory(name, f"/{name}", 2 * NBYTES)
        tensor.set_shared_memory(name, NBYTES)
        output.set_shared_memory(name, NBYTES, NBYTES)

        def check():
            client.infer(MODEL, [tensor], outputs=[output])
            return shm.get_contents_as_numpy(handle, np.float32, list(IMAGE), NBYTES)

        def cleanup():
            client.unregister_system_shared_memory(name)
            shm.destroy_shared_memory_region(handle)
            client.close()

        return (lambda: client.infer(MODEL, [tensor], outputs=[output])), check, cleanup
    # CUDA shared memory, the input `offset` bytes into the region
    offset = 16 if mode == "cuda +16" else 0
    region = CudaRegion(2 * NBYTES + 4096)
    region.copy(region.pointer + offset, x.ctypes.data, NBYTES)
    name = f"bench_{tag}"
    body = {
        "raw_handle": {"b64": base64.b64encode(region.raw_handle).decode()},
        "device_id": 0,
        "byte_size": 2 * NBYTES + 4096,
    }
    registered = httpx.post(f"http://{url}/v2/cudasharedmemory/region/{name}/register", json=body)
    assert registered.status_code == 200, registered.text
    tensor.set_shared_memory(name, NBYTES, offset)
    out_at = NBYTES + 256
    output.set_shared_memory(name, NBYTES, out_at)

    def check():
        client.infer(MODEL, [tensor], outputs=[output])
        y = np.empty(IMAGE, np.float32)
        region.copy(y.ctypes.data, region.pointer + out_at, NBYTES)
        return y

    def cleanup():
        httpx.post(f"http://{url}/v2/cudasharedmemory/region/{name}/unregister")
        client.close()

    return (lambda: client.infer(MODEL, [tensor], outputs=[output])), check, cleanup


def _worker(mode, url, grpc_url, x, start_at, seconds, queue):
    call, check, cleanup = _client_mode(mode, url, grpc_url, x)
    np.testing.assert_allclose(check(), x * 2 + 1, rtol=1e-6)
    for _ in range(3):
        call()
    while time.time() < start_at:
        time.sleep(0.001)
    latencies, deadline = [], time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        begun = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - begun)
    cleanup()
    queue.put(latencies)


def run(mode, clients, url, grpc_url, x, seconds) -> tuple[float, float, float]:
    """(req/s, p50 ms, p99 ms) of `clients` processes running `mode` for `seconds`."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    start_at = time.time() + 3.0 + 0.3 * clients  # every client set up before any measures
    workers = [
        context.Process(target=_worker, args=(mode, url, grpc_url, x, start_at, seconds, queue))
        for _ in range(clients)
    ]
    for worker in workers:
        worker.start()
    latencies = [lat for _ in workers for lat in queue.get(timeout=120 + seconds)]
    for worker in workers:
        worker.join()
    return (
        len(latencies) / seconds,
        float(np.percentile(latencies, 50)) * 1e3,
        float(np.percentile(latencies, 99)) * 1e3,
    )


def copies(url: str) -> str:
    text = httpx.get(f"http://{url}/metrics").text
    return " ".join(line for line in text.splitlines() if line.startswith("etrt_shm_copies_total{"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1, help="front processes of the server")
    parser.add_argument("--cuda", action="store_true", help="CUDA shared memory (a GPU host)")
    parser.add_argument("--programs-dir", type=Path, default=None)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-shm-"))
    image = programs.export_image(args.programs_dir or scratch / "programs")
    x = np.ascontiguousarray(image.example_inputs[0].numpy())
    modes = ["cuda", "cuda +16", "binary"] if args.cuda else ["system shm", "binary", "grpc"]
    flags = ["--allow-client-shm", "--workers", str(args.workers), "--log-level", "warning"]
    with ServerProcess(scratch / "artifacts", *flags) as server:
        with server.client() as client:
            assert upload(client, MODEL, image.pte, image.ptds).status_code == 201
        url = server.url.removeprefix("http://")
        rows = []
        for clients in (1, args.clients):
            for mode in modes:
                rows.append(
                    (mode, clients, *run(mode, clients, url, server.grpc_url, x, args.seconds))
                )
        counted = copies(url)
    base = {c: r for m, c, r, _, _ in rows if m == "binary"}
    print(f"1x3x224x224 FP32, x * 2 + 1, --workers {args.workers}, {args.seconds:.0f} s per row")
    print("| mode | clients | req/s | p50 ms | p99 ms | vs v2 binary |")
    print("|---|---|---|---|---|---|")
    for mode, clients, rate, p50, p99 in rows:
        ratio = rate / base[clients]
        print(f"| {mode} | {clients} | {rate:.0f} | {p50:.2f} | {p99:.2f} | {ratio:.2f}x |")
    print(f"engine copies: {counted or 'none'}")


if __name__ == "__main__":
    main()
