"""Benchmark: an image-sized request (1x3x224x224 FP32) over gRPC raw contents, v2 REST binary
tensors and the native JSON /infer, against one server process in the same run.

Sequential requests from one client for each protocol in turn; prints req/s, p50 and p99, and
each protocol's throughput as a ratio of the native JSON route's. The model is x * 2 + 1, so the
figures are the protocols' cost, not the model's.

usage: python bench/bench_grpc.py [--seconds 5] [--programs-dir DIR]
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402

from scratch import scratch_dir  # noqa: E402
from support import programs  # noqa: E402
from support.server import ServerProcess, tensor, upload  # noqa: E402


def measure(call, seconds: float) -> list[float]:
    for _ in range(3):
        call()
    latencies, deadline = [], time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - start)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--programs-dir", type=Path, default=None)
    args = parser.parse_args()
    scratch = scratch_dir("bench-grpc-")
    image = programs.export_image(args.programs_dir or scratch / "programs")
    x = image.example_inputs[0].numpy()
    expected = x * 2 + 1
    with ServerProcess(scratch / "artifacts", "--log-level", "warning") as server:
        with server.client() as client:
            assert upload(client, "image", image.pte).status_code == 201
            grpc_client = grpcclient.InferenceServerClient(server.grpc_url)
            http_client = httpclient.InferenceServerClient(f"127.0.0.1:{server.port}")
            grpc_input = grpcclient.InferInput("input_0", list(x.shape), "FP32")
            grpc_input.set_data_from_numpy(x)
            http_input = httpclient.InferInput("input_0", list(x.shape), "FP32")
            http_input.set_data_from_numpy(x, binary_data=True)
            body = {"model": "image", "inputs": [tensor(x)]}

            def via_grpc():
                return grpc_client.infer("image", [grpc_input]).as_numpy("output_0")

            def via_v2_binary():
                return http_client.infer("image", [http_input]).as_numpy("output_0")

            def via_native_json():
                response = client.post("/infer", json=body)
                return np.array(response.json()["outputs"][0]["data"], np.float32).reshape(x.shape)

            cases = {
                "gRPC raw": via_grpc,
                "v2 REST binary": via_v2_binary,
                "native JSON /infer": via_native_json,
            }
            for call in cases.values():
                np.testing.assert_allclose(call(), expected, rtol=1e-6)
            results = {name: measure(call, args.seconds) for name, call in cases.items()}
    baseline = len(results["native JSON /infer"]) / args.seconds
    print(f"{'protocol':<20} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'x native JSON':>14}")
    for name, latencies in results.items():
        ms = np.percentile(np.array(latencies) * 1000, [50, 99])
        rate = len(latencies) / args.seconds
        print(f"{name:<20} {rate:>8.1f} {ms[0]:>8.2f} {ms[1]:>8.2f} {rate / baseline:>14.2f}")


if __name__ == "__main__":
    main()
