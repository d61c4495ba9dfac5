"""Images at the GPU's pace, what the fronts take: 1x3x224x224 FP32 (602 KB) and 1x224x224x3
UINT8 (150 KB) image requests over v2 binary, the fronts' native path against the Python (ASGI)
path in the same run and the same server, plus gRPC and system shared memory.

    python bench/bench_images.py --export DIR          # here: export the programs (torch)
    python bench/bench_images.py --programs DIR [--workers 8] [--seconds 5] [--connections 64]

The two HTTP paths are told apart by the URL: `/v2/models/m/infer` is offered to the native
path, which takes a v2 binary body whose head and JSON header have arrived and streams the rest
into its arena slot; the same URL with a query string (`?path=python`) is always the Python
path's (the native path takes only the plain form), which is how every image request went
before. Per case: req/s (wrk -t4), p50/p99, request tensor GB/s, the fronts' CPU per
request (and the engine's event-loop thread and lane threads), from /proc, and the share of
requests the native path took (etrt_front_native_requests_total). System shared memory requests
(v2 JSON naming the regions) are measured on both paths too.

Programs: FP32 x * 2 + 1 lowered to XNNPACK (the bytes' way through the server is what is
measured; its answer is as large as the request), and FP32 x[:, :, 0, 0] + 1 and UINT8
x[:, 0, 0, :] + 1 (3-value answers: a classifier's size). Goals (issue 31, on
the 16-core host with 8 fronts): FP32 v2 binary >= 15,000 req/s, UINT8 >= 30,000 req/s, system
shared memory >= 50,000 req/s, gRPC images >= 4 GB/s. Case `grpc` runs the image calls twice:
as they are (the fronts' native path takes them) and naming the default method in a request
parameter (the servicer's path, which every call took before: the same run's baseline). Case
`shms` (with `shm`) adds system shared memory to the small-answer program; case `cudashm` (not
by default: it needs cupy and a GPU) the image in a CUDA region, to both programs. Case
`grpcfloor` measures grpcio alone in as many processes as fronts (bench/grpc_floor.py): the
fronts' gRPC CPU per request minus it is the server's own code. Cases `grpcs` and `grpcsfloor`
are the same with the classifier-sized answer (the image in, 3 values out). The gRPC clients
are `--grpc-clients` processes of grpcio (4 by default), or h2load with `--grpc-load h2load`
(bench/h2load_grpc.py: C, about half grpcio's CPU per image call); their CPU per call is printed
too, since on one host they share its cores, and so is the share of calls the server answered
ok (h2load sees only HTTP statuses).

Those programs run on the CPU, so a CUDA-region image is copied to the host first. Case
`cudatrt` (a GPU host, with `--trt-programs DIR` from `python -m support.trt_programs DIR`)
puts the whole request on the GPU, as a TensorRT program would take it: a second server whose
TensorRT delegate runs the spin stand-in (tests/support/spin_engine_provider.py: a real CUDA
kernel, here with no spin, launched from Python under the GIL where TensorRT's enqueue takes
none) over an image-sized add whose inputs and output are left out of memory planning, so the
image is bound where it lies in the region and the answer is written into the region. Case
`cudatrtg` is the same with the model configured `use_cuda_graphs`: each instance captures the
launch once and replays it from C++, with no provider call and no GIL per request.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from bench_http import Request, wrk  # noqa: E402
from bench_workers import Ours, grpc_load, image_call  # noqa: E402
from grpc_floor import MODES, floor  # noqa: E402
from h2load_grpc import answered_ok, h2load_grpc  # noqa: E402
from h2load_grpc import available as h2load_available  # noqa: E402
from scratch import scratch_dir  # noqa: E402
from support import programs  # noqa: E402

FP32 = (1, 3, 224, 224)
UINT8 = (1, 224, 224, 3)
SPIN_BACKEND = "support.test_backend_setup:install_spin_backend_on_cuda"


def export(out_dir: Path) -> dict:
    import torch

    class Corner(torch.nn.Module):  # a 3-value answer, a classifier's size
        def __init__(self, channels_last: bool):
            super().__init__()
            self.channels_last = channels_last

        def forward(self, x):
            return (x[:, 0, 0, :] if self.channels_last else x[:, :, 0, 0]) + 1

    return {
        "image": programs.export_image(out_dir, xnnpack=True),
        "image_small": programs.export_module(
            out_dir, "bench_image_fp32_corner", Corner(False), (torch.zeros(FP32),)
        ),
        "image_u8": programs.export_module(
            out_dir, "bench_image_u8_corner", Corner(True), (torch.zeros(UINT8, dtype=torch.uint8),)
        ),
    }


def binary(model: str, x: np.ndarray, datatype: str, query: str = "") -> Request:
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "input_0",
                    "datatype": datatype,
                    "shape": list(x.shape),
                    "parameters": {"binary_data_size": x.nbytes},
                }
            ],
            "outputs": [{"name": "output_0", "parameters": {"binary_data": True}}],
        }
    ).encode()
    return Request(
        f"/v2/models/{model}/infer{query}",
        header + x.tobytes(),
        "application/octet-stream",
        {"Inference-Header-Content-Length": str(len(header))},
    )


def system_shm(
    model: str, region: str, x: np.ndarray, datatype: str, out_bytes: int, query: str = ""
) -> Request:
    def ref(offset: int, nbytes: int) -> dict:
        return {
            "shared_memory_region": region,
            "shared_memory_byte_size": nbytes,
            "shared_memory_offset": offset,
        }

    body = {
        "inputs": [
            {
                "name": "input_0",
                "datatype": datatype,
                "shape": list(x.shape),
                "parameters": ref(0, x.nbytes),
            }
        ],
        "outputs": [{"name": "output_0", "parameters": ref(x.nbytes, out_bytes)}],
    }
    return Request(f"/v2/models/{model}/infer{query}", json.dumps(body).encode())


def cuda_region(server, x: np.ndarray) -> str:
    """A CUDA region of twice the image's bytes holding it (cupy: its own allocation, exported
    by IPC handle as tritonclient's cuda_shared_memory does), registered; its name."""
    import base64

    import cupy

    runtime = cupy.cuda.runtime
    nbytes = 2 * x.nbytes
    device = runtime.malloc(nbytes)
    runtime.memcpy(device, x.ctypes.data, x.nbytes, runtime.memcpyHostToDevice)
    name = f"images_cuda_{uuid.uuid4().hex[:8]}"
    with server.server.client() as client:
        registered = client.post(
            f"/v2/cudasharedmemory/region/{name}/register",
            json={
                "raw_handle": {
                    "b64": base64.b64encode(bytes(runtime.ipcGetMemHandle(device))).decode()
                },
                "device_id": 0,
                "byte_size": nbytes,
            },
        )
        assert registered.status_code == 200, registered.text
    return name


def trt_server(
    scratch: Path, trt_programs: Path, workers: int, instances: int, graphs: bool = False
) -> Ours:
    """A server whose TensorRT delegate runs the spin stand-in with no spin, serving `image_trt`
    (x + y, 1x3x224x224 FP32, inputs and output unplanned: bound where they lie); `graphs`:
    configured with use_cuda_graphs, so that each instance replays its captured launch from
    C++ instead of calling the provider (Python) per request."""
    from support.trt_models import UNPLANNED_OUTPUTS_SET, TrtProgram

    program = TrtProgram.at(
        trt_programs, *UNPLANNED_OUTPUTS_SET[1], planned_inputs=False, planned_outputs=False
    )
    if not program.exists():
        raise SystemExit(f"{program.pte} is missing: python -m support.trt_programs DIR")
    home = scratch / ("trt-graphs" if graphs else "trt")
    home.mkdir()
    flags = ("--allow-client-shm", "--log-level", "warning", "--backend-setup", SPIN_BACKEND)
    env = {"ETRT_TEST_SPIN_US": "0", "ETRT_TEST_SPIN_ROW_US": "0"}
    config = {"parameters": {"use_cuda_graphs": {"string_value": "true"}}} if graphs else None
    return Ours(home, {"image_trt": program}, workers, instances, flags, env=env, config=config)


def cuda_trt_request(server: Ours, region: str, x: np.ndarray) -> Request:
    """x + x from the image at the region's start, the answer into the region after it."""
    with server.server.client() as client:
        metadata = client.get("/v2/models/image_trt").json()

    def ref(offset: int) -> dict:
        return {
            "shared_memory_region": region,
            "shared_memory_byte_size": x.nbytes,
            "shared_memory_offset": offset,
        }

    inputs = [
        {"name": i["name"], "datatype": "FP32", "shape": list(x.shape), "parameters": ref(0)}
        for i in metadata["inputs"]
    ]
    outputs = [{"name": metadata["outputs"][0]["name"], "parameters": ref(x.nbytes)}]
    body = json.dumps({"inputs": inputs, "outputs": outputs}).encode()
    return Request("/v2/models/image_trt/infer", body)


def answered(server, model: str) -> float:
    """Requests for `model` the server answered ok so far."""
    with server.server.client() as client:
        return answered_ok(client.get("/metrics").text, model)


def native_requests(server) -> float:
    """Requests the fronts' native paths have taken so far (etrt_front_native_requests_total)."""
    with server.server.client() as client:
        text = client.get("/metrics").text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("etrt_front_native_requests_total")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", type=Path)
    parser.add_argument("--programs", type=Path)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--instances", type=int, default=None, help="instances per model")
    parser.add_argument("--cases", default="fp32,fp32s,u8,shm,grpc,grpcfloor")
    parser.add_argument("--trt-programs", type=Path, help="case cudatrt: support.trt_programs'")
    parser.add_argument("--grpc-clients", type=int, default=4, help="gRPC client processes")
    parser.add_argument(
        "--grpc-load",
        choices=("grpcio", "h2load"),
        default="grpcio",
        help="gRPC clients: grpcio's (Python) or h2load's (C; bench/h2load_grpc.py)",
    )
    args = parser.parse_args()
    if args.export:
        print({name: str(p.pte) for name, p in export(args.export).items()})
        return
    exported = export(args.programs)
    scratch = scratch_dir("bench-images-")
    instances = args.instances or max(2, args.workers)
    server = Ours(scratch, exported, args.workers, instances, ["--allow-client-shm"])
    rng = np.random.default_rng(0)
    fp32 = rng.standard_normal(FP32, dtype=np.float32)
    u8 = rng.integers(0, 256, UINT8, dtype=np.uint8)
    cases = args.cases.split(",")
    h2load = args.grpc_load == "h2load"
    if h2load and not h2load_available():
        raise SystemExit("--grpc-load h2load needs h2load on PATH (Debian: nghttp2-client)")
    rows, costs = [], {}
    region = None

    def measure(label: str, request: Request, nbytes: int, on: Ours | None = None) -> None:
        target = on or server
        wrk(target.url, request, args.connections, 1, scratch, threads=4)  # warm-up
        time.sleep(1.5)  # the fronts' counts reach the engine every half second
        sent_before = sum(target.front_requests().values())
        native_before = native_requests(target)
        before = target.cpu_s()
        load = wrk(target.url, request, args.connections, args.seconds, scratch, threads=4)
        after = target.cpu_s()
        time.sleep(1.5)
        served = max(1, sum(target.front_requests().values()) - sent_before)
        native = (native_requests(target) - native_before) / served
        fronts_us, user_us, sys_us, lanes_us, _ = (
            (b - a) / served * 1e6 for a, b in zip(before, after)
        )
        rows.append((label, load.rps))
        costs[label] = fronts_us
        print(
            f"  {label:<34} {load}  {load.rps * nbytes / 1e9:.2f} GB/s;"
            f" CPU per request: fronts {fronts_us:.0f} us, engine thread {user_us + sys_us:.0f} us,"
            f" lanes {lanes_us:.0f} us; {native:.0%} native",
            flush=True,
        )

    try:
        print(f"images, --workers {args.workers}, wrk -t4 -c{args.connections}, {args.seconds:g} s")
        if "fp32" in cases:
            measure(
                "FP32 v2 binary, Python path",
                binary("image", fp32, "FP32", "?path=python"),
                fp32.nbytes,
            )
            measure("FP32 v2 binary, native path", binary("image", fp32, "FP32"), fp32.nbytes)
        if "fp32s" in cases:
            request = binary("image_small", fp32, "FP32", "?path=python")
            measure("FP32, small answer, Python path", request, fp32.nbytes)
            request = binary("image_small", fp32, "FP32")
            measure("FP32, small answer, native path", request, fp32.nbytes)
        if "u8" in cases:
            measure(
                "UINT8 v2 binary, Python path",
                binary("image_u8", u8, "UINT8", "?path=python"),
                u8.nbytes,
            )
            measure("UINT8 v2 binary, native path", binary("image_u8", u8, "UINT8"), u8.nbytes)
        if "shm" in cases:
            from multiprocessing import shared_memory

            name = f"images_{uuid.uuid4().hex[:8]}"
            region = shared_memory.SharedMemory(name, create=True, size=2 * fp32.nbytes)
            np.frombuffer(region.buf, np.float32, fp32.size)[:] = fp32.ravel()
            with server.server.client() as client:
                registered = client.post(
                    f"/v2/systemsharedmemory/region/{name}/register",
                    json={"key": f"/{name}", "offset": 0, "byte_size": 2 * fp32.nbytes},
                )
                assert registered.status_code == 200, registered.text
            for path, query in (("Python path", "?path=python"), ("native path", "")):
                request = system_shm("image", name, fp32, "FP32", fp32.nbytes, query)
                measure(f"FP32 system shm, {path}", request, fp32.nbytes)
            if "shms" in cases:  # a classifier-sized answer: executes short enough to run inline
                for path, query in (("Python path", "?path=python"), ("native path", "")):
                    request = system_shm("image_small", name, fp32, "FP32", 12, query)
                    measure(f"FP32 system shm, small answer, {path}", request, fp32.nbytes)
        if "cudashm" in cases:  # needs cupy and a GPU: the image in a CUDA region
            cuda_name = cuda_region(server, fp32)
            for path, query in (("Python path", "?path=python"), ("native path", "")):
                request = system_shm("image", cuda_name, fp32, "FP32", fp32.nbytes, query)
                measure(f"FP32 CUDA shm, {path}", request, fp32.nbytes)
                request = system_shm("image_small", cuda_name, fp32, "FP32", 12, query)
                measure(f"FP32 CUDA shm, small answer, {path}", request, fp32.nbytes)
        for case, graphs in (("cudatrt", False), ("cudatrtg", True)):
            if case not in cases:  # the whole request on the GPU, as a TensorRT program takes it
                continue
            if args.trt_programs is None:
                raise SystemExit(f"case {case} needs --trt-programs")
            trt = trt_server(scratch, args.trt_programs, args.workers, instances, graphs)
            what = "GPU program, CUDA graphs" if graphs else "GPU program"
            try:
                request = cuda_trt_request(trt, cuda_region(trt, fp32), fp32)
                with trt.server.client() as client:
                    probe = client.post(request.path, content=request.body)
                assert probe.status_code == 200, probe.text
                measure(f"FP32 CUDA shm, {what}, native path", request, fp32.nbytes, trt)
                request = Request(request.path + "?path=python", request.body)
                measure(f"FP32 CUDA shm, {what}, Python path", request, fp32.nbytes, trt)
            finally:
                trt.stop()
        for case, model, answer in (("grpc", "image", fp32.nbytes), ("grpcs", "image_small", 12)):
            what = "FP32 gRPC" if case == "grpc" else "FP32 gRPC, small answer"
            # The fronts' native path takes the calls; with a request parameter (the default
            # method named) the servicer does, as every gRPC call went before: the baseline.
            paths = (("native path", False), ("servicer", True)) if case in cases else ()
            for label, servicer in paths:
                address = server.server.grpc_url
                clients = args.grpc_clients
                if not h2load:  # a warm-up (h2load has its own)
                    conns = args.connections
                    grpc_load(address, model, fp32, 1, conns, processes=clients, servicer=servicer)
                time.sleep(1.5)  # the fronts' counts reach the engine every half second
                sent_before = sum(server.front_requests().values())
                native_before = native_requests(server)
                ok_before = answered(server, model)
                before = server.cpu_s()
                if h2load:  # its warm-up second is inside the counts and the CPU alike
                    message = image_call(model, fp32, servicer)
                    load = h2load_grpc(address, message, args.seconds, args.connections)
                else:
                    load = grpc_load(
                        address, model, fp32, args.seconds, args.connections,
                        processes=clients, servicer=servicer,
                    )  # fmt: skip
                after = server.cpu_s()
                time.sleep(1.5)
                served = max(1, sum(server.front_requests().values()) - sent_before)
                native = (native_requests(server) - native_before) / served
                ok = (answered(server, model) - ok_before) / served
                fronts_us = (after[0] - before[0]) / served * 1e6
                name = f"{what}, {label}"
                print(
                    f"  {name:<34} {load}  {load.rps * fp32.nbytes / 1e9:.2f} GB/s;"
                    f" CPU per request: fronts {fronts_us:.0f} us, clients {load.client_us:.0f} us;"
                    f" native {native:.2f}, answered ok {ok:.2f}",
                    flush=True,
                )
            if f"{case}floor" in cases:  # grpcio alone, in as many processes as there are fronts
                for mode in MODES:
                    load, us = floor(
                        mode, args.workers, fp32, args.seconds, args.connections, answer,
                        processes=args.grpc_clients, h2load=h2load,
                    )  # fmt: skip
                    label = f"{what}, grpcio floor ({mode})"
                    print(
                        f"  {label:<34} {load}  {load.rps * fp32.nbytes / 1e9:.2f} GB/s;"
                        f" CPU per request: servers {us:.0f} us, clients {load.client_us:.0f} us",
                        flush=True,
                    )
        found = dict(rows)
        kinds = ("FP32 v2 binary", "FP32, small answer", "UINT8 v2 binary", "FP32 system shm",
                 "FP32 system shm, small answer", "FP32 CUDA shm",
                 "FP32 CUDA shm, small answer", "FP32 CUDA shm, GPU program")  # fmt: skip
        for kind in kinds:
            native, python = found.get(f"{kind}, native path"), found.get(f"{kind}, Python path")
            if native and python:
                print(
                    f"  {kind}: native / Python path {native / python:.2f}x req/s; fronts' CPU"
                    f" per request {costs[f'{kind}, native path']:.0f} us native,"
                    f" {costs[f'{kind}, Python path']:.0f} us Python"
                )
    finally:
        server.stop()
        if region is not None:
            region.close()
            region.unlink()


if __name__ == "__main__":
    main()
