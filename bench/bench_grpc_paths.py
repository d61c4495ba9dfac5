"""Benchmark: gRPC ModelInfer on a front's two paths, in the same run. A call is taken by the
front's native path (runtime_ext/front/grpc_infer.h); the same call naming the default method in
a request parameter by the servicer, as every call went before; and the first with a deadline
of 60 s (KServe's client default), which the native path takes too. Closed-loop calls
from `--connections` channels (bench_workers.grpc_load), for a small request (the [1, 4] FP32
linear program), the same with its input and output in system shared memory regions
(tritonclient's set_shared_memory parameters), and an image (1x3x224x224 FP32 in and out,
XNNPACK), the two paths alternating for `--rounds` rounds; prints req/s and the fronts' CPU per
call, and per case the ratio servicer / native of that CPU (medians over the rounds).

usage: python bench/bench_grpc_paths.py [--workers 1] [--seconds 4] [--connections 16]
       [--rounds 3] [--programs-dir DIR]
"""

import argparse
import contextlib
import os
import statistics
import sys
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from bench_workers import grpc_load  # noqa: E402
from grpc_floor import cpu_s  # noqa: E402
from scratch import scratch_dir  # noqa: E402
from support import programs  # noqa: E402
from support.processes import role_pids  # noqa: E402
from support.server import ServerProcess, upload  # noqa: E402

# (name, for the servicer, the call's deadline in s): KServe's gRPC client sends 60 s by default.
PATHS = (("native path", False, None), ("servicer", True, None), ("native, 60 s", False, 60.0))


def _shm_message(server, x: np.ndarray, regions: list) -> bytes:
    """A ModelInfer message whose input and output lie in system shared memory regions, made
    and registered here (tritonclient's utility and client)."""
    from service.front.protocols.v2_grpc import messages

    name = f"b{os.getpid()}"
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        for side in ("in", "out"):
            handle = shm.create_shared_memory_region(f"{side}{name}", f"/{side}{name}", 4096)
            regions.append(handle)
            client.register_system_shared_memory(f"{side}{name}", f"/{side}{name}", 4096)
    shm.set_shared_memory_region(regions[0], [x])
    request = messages.ModelInferRequest(model_name="small")
    tensor = request.inputs.add(name="input_0", datatype="FP32", shape=list(x.shape))
    tensor.parameters["shared_memory_region"].string_param = f"in{name}"
    tensor.parameters["shared_memory_byte_size"].int64_param = x.nbytes
    output = request.outputs.add(name="output_0")
    output.parameters["shared_memory_region"].string_param = f"out{name}"
    output.parameters["shared_memory_byte_size"].int64_param = 4096
    return request.SerializeToString()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--programs-dir", type=Path, default=None)
    args = parser.parse_args()
    scratch = scratch_dir("bench-grpc-paths-")
    folder = args.programs_dir or scratch / "programs"
    small = programs.export_linear_relu(folder)
    image = programs.export_image(folder, xnnpack=True)
    x_small = small.example_inputs[0].numpy()
    cases = {
        "small [1, 4] FP32": ("small", small, x_small),
        "small, system shm": ("small", small, x_small),
        "image 1x3x224x224 FP32": (
            "image",
            image,
            np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32),
        ),
    }
    server = ServerProcess(scratch / "artifacts", "--log-level", "warning", "--workers",
                           str(args.workers), "--allow-client-shm")  # fmt: skip
    regions = []
    with server, contextlib.ExitStack() as cleanup:
        cleanup.callback(lambda: [shm.destroy_shared_memory_region(r) for r in regions])
        with server.client() as client:
            for model, program in {model: program for model, program, _ in cases.values()}.items():
                assert upload(client, model, program.pte, program.ptds).status_code == 201
        bodies = {"small, system shm": _shm_message(server, x_small, regions)}
        fronts = role_pids(server, "front")
        print(f"gRPC ModelInfer, --workers {args.workers}, {args.connections} channels, "
              f"{args.seconds:g} s x {args.rounds} rounds")  # fmt: skip
        for label, (model, _, x) in cases.items():
            per_call: dict[str, list[float]] = {name: [] for name, _, _ in PATHS}
            for _ in range(args.rounds):
                for name, servicer, deadline in PATHS:
                    body = bodies.get(label)
                    url, conns = server.grpc_url, args.connections
                    grpc_load(url, model, x, 1, conns, deadline, body, servicer=servicer)
                    before = cpu_s(fronts)
                    load = grpc_load(
                        url, model, x, args.seconds, conns, deadline, body, servicer=servicer
                    )
                    used = cpu_s(fronts) - before
                    us = used / max(1.0, load.rps * args.seconds) * 1e6
                    per_call[name].append(us)
                    print(f"  {label:<24} {name:<12} {load}  fronts {us:.0f} us a call")
            native, servicer, timed = (statistics.median(per_call[name]) for name, _, _ in PATHS)
            print(f"  {label}: fronts' CPU a call, servicer / native path = "
                  f"{servicer / native:.2f}x ({servicer:.0f} / {native:.0f} us), with a 60 s "
                  f"deadline {timed:.0f} us")  # fmt: skip


if __name__ == "__main__":
    main()
