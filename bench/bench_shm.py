"""Benchmark: an image-sized request (1x3x224x224 FP32, the x * 2 + 1 program) with its input
and output in system shared memory, against v2 REST binary tensors and gRPC raw contents, in
the same run against the same server; sequential (one client) and 16 concurrent clients (one
process each, each with its own regions). Prints req/s, p50 and p99, and each mode's
throughput as a ratio of v2 binary's.

`--cuda` (a GPU host): a TensorRT-delegated image-sized add (x + y, inputs left out of memory
planning; the test engine provider on CUDA memory stands in for TensorRT) with both inputs
and the output in CUDA shared memory (a region exported by the client with cuda-python), the
inputs on a 256-byte boundary and 16 bytes off one, against v2 binary; one client, since the
question is what each request costs above the execute: the client's latency minus the server's
compute_infer (statistics extension), and the delegate's staging copies of each case.

usage: python bench/bench_shm.py [--seconds 5] [--clients 16] [--workers 1]
                                 [--cuda [--trt-programs DIR]] [--programs-dir DIR]
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import json
import multiprocessing
import sys
import time
import uuid
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from scratch import scratch_dir  # noqa: E402
from support import programs  # noqa: E402
from support.server import ServerProcess, upload  # noqa: E402

IMAGE = (1, 3, 224, 224)
NBYTES = int(np.prod(IMAGE)) * 4
MODEL = "image"
TRT_MODEL = "image_add"
TRT_BACKEND = "support.test_backend_setup:install_test_backend_on_cuda"


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
    raise ValueError(f"unknown mode {mode!r}")


def _cuda_client(mode: str, url: str, xs: list[np.ndarray]):
    """(call, check, cleanup) for a client of the TensorRT add with its inputs and output in a
    CUDA region, the inputs 16 bytes off a 256-byte boundary for "cuda +16"; or, for "binary",
    the v2 binary tensor extension. Plain httpx: tritonclient is not on the GPU host."""
    client = httpx.Client(base_url=f"http://{url}", timeout=60)
    metadata = client.get(f"/v2/models/{TRT_MODEL}").json()
    names = [i["name"] for i in metadata["inputs"]]
    output_name = metadata["outputs"][0]["name"]
    infer = f"/v2/models/{TRT_MODEL}/infer"
    if mode == "binary":
        header = json.dumps(
            {
                "inputs": [
                    {
                        "name": n,
                        "datatype": "FP32",
                        "shape": list(IMAGE),
                        "parameters": {"binary_data_size": NBYTES},
                    }
                    for n in names
                ],
                "outputs": [{"name": output_name, "parameters": {"binary_data": True}}],
            }
        ).encode()
        body = header + b"".join(x.tobytes() for x in xs)
        headers = {"Inference-Header-Content-Length": str(len(header))}

        def call():
            response = client.post(infer, content=body, headers=headers)
            assert response.status_code == 200, response.text
            at = int(response.headers["Inference-Header-Content-Length"])
            return np.frombuffer(response.content[at:], np.float32).reshape(IMAGE)

        return call, call, client.close
    misalign = 16 if mode == "cuda +16" else 0
    slot = NBYTES + 256  # each tensor in a slot of its own, slots on 256-byte boundaries
    region = CudaRegion(3 * slot + 256)
    for i, x in enumerate(xs):
        region.copy(region.pointer + i * slot + misalign, x.ctypes.data, NBYTES)
    name = f"bench_{uuid.uuid4().hex[:8]}"
    registered = client.post(
        f"/v2/cudasharedmemory/region/{name}/register",
        json={
            "raw_handle": {"b64": base64.b64encode(region.raw_handle).decode()},
            "device_id": 0,
            "byte_size": 3 * slot + 256,
        },
    )
    assert registered.status_code == 200, registered.text

    def ref(offset):
        return {
            "shared_memory_region": name,
            "shared_memory_byte_size": NBYTES,
            "shared_memory_offset": offset,
        }

    request = {
        "inputs": [
            {
                "name": n,
                "datatype": "FP32",
                "shape": list(IMAGE),
                "parameters": ref(i * slot + misalign),
            }
            for i, n in enumerate(names)
        ],
        "outputs": [{"name": output_name, "parameters": ref(2 * slot)}],
    }

    def call():
        response = client.post(infer, json=request)
        assert response.status_code == 200, response.text

    def check():
        call()
        y = np.empty(IMAGE, np.float32)
        region.copy(y.ctypes.data, region.pointer + 2 * slot, NBYTES)
        return y

    def cleanup():
        client.post(f"/v2/cudasharedmemory/region/{name}/unregister")
        client.close()

    return call, check, cleanup


def _worker(mode, url, grpc_url, x, start_at, seconds, queue):
    if isinstance(x, list):  # --cuda: the TensorRT add's two inputs (cuda_main)
        call, check, cleanup = _cuda_client(mode, url, x)
        np.testing.assert_allclose(check(), x[0] + x[1], rtol=1e-6)
    else:
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


def _staging(url: str) -> dict[str, float]:
    """The TensorRT add's staging copies so far, by binding."""
    found = {}
    for line in httpx.get(f"http://{url}/metrics").text.splitlines():
        if line.startswith("etrt_tensorrt_staging_copies_total{") and f'"{TRT_MODEL}"' in line:
            binding = line.split('binding="', 1)[1].split('"', 1)[0]
            found[binding] = found.get(binding, 0) + float(line.split()[-1])
    return found


def _execute_ns(url: str) -> tuple[int, int]:
    """(requests, nanoseconds executing) of the TensorRT add so far (compute_infer)."""
    [stats] = httpx.get(f"http://{url}/v2/models/{TRT_MODEL}/stats").json()["model_stats"]
    infer = stats["inference_stats"]["compute_infer"]
    return infer["count"], infer["ns"]


def _trt_program(where: Path | None, scratch: Path):
    from support.trt_models import TrtProgram

    if where is not None:
        found = TrtProgram.at(where, TRT_MODEL, 256, planned_inputs=False)
        if not found.exists():
            raise SystemExit(f"{where} lacks {found.pte.name}")
        return found
    from support.trt_programs import export_trt_program

    return export_trt_program(scratch / "trt", TRT_MODEL, 256, planned_inputs=False)


def cuda_main(args, scratch: Path) -> None:
    program = _trt_program(args.trt_programs, scratch)
    xs = program.example_inputs()
    flags = ["--allow-client-shm", "--workers", str(args.workers), "--log-level", "warning"]
    rows = []
    with ServerProcess(scratch / "artifacts", *flags, "--backend-setup", TRT_BACKEND) as server:
        with server.client() as client:
            assert upload(client, TRT_MODEL, program.pte).status_code == 201
        url = server.url.removeprefix("http://")
        for mode in ("cuda", "cuda +16", "binary"):
            (n0, ns0), staged0 = _execute_ns(url), _staging(url)
            rate, p50, p99 = run(mode, 1, url, server.grpc_url, xs, args.seconds)
            (n1, ns1), staged1 = _execute_ns(url), _staging(url)
            execute_ms = (ns1 - ns0) / max(n1 - n0, 1) / 1e6
            calls = max(n1 - n0, 1)
            per_call = {b: (staged1[b] - staged0.get(b, 0)) / calls for b in staged1}
            rows.append((mode, rate, p50, execute_ms, per_call))
        counted = copies(url)
    print(
        f"1x3x224x224 FP32 x + y, TensorRT test engine on CUDA memory, {args.seconds:.0f} s per row"
    )
    print(
        "| mode | req/s | p50 ms | execute ms | p50 above execute ms | staging copies per request |"
    )
    print("|---|---|---|---|---|---|")
    for mode, rate, p50, execute_ms, per_call in rows:
        staged = ", ".join(f"{b} {n:g}" for b, n in sorted(per_call.items())) or "none"
        above = p50 - execute_ms
        print(f"| {mode} | {rate:.0f} | {p50:.2f} | {execute_ms:.2f} | {above:.2f} | {staged} |")
    print(f"engine copies: {counted or 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1, help="front processes of the server")
    parser.add_argument("--cuda", action="store_true", help="CUDA shared memory (a GPU host)")
    parser.add_argument(
        "--trt-programs", type=Path, default=None, help="with --cuda: exported TensorRT programs"
    )
    parser.add_argument("--programs-dir", type=Path, default=None)
    args = parser.parse_args()
    scratch = scratch_dir("bench-shm-")
    if args.cuda:
        cuda_main(args, scratch)
        return
    image = programs.export_image(args.programs_dir or scratch / "programs")
    x = np.ascontiguousarray(image.example_inputs[0].numpy())
    modes = ["system shm", "binary", "grpc"]
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
