"""Benchmark: gRPC through the HTTP port (--one-port: the front relays the HTTP/2 connection to
its gRPC server) against gRPC on its own port, one server, the same run.

For a tiny request (2x4 FP32, linear+relu) and an image-sized one (1x3x224x224 FP32, x*2+1):
one client in sequence (latency), then CONCURRENCY clients at once (throughput), each on its own
connection. The two paths alternate in rounds, so drift in the machine's load falls on both.
Prints req/s, p50 and p99 per path and the relay's throughput as a ratio of the direct port's
(the target: >= 0.9).

usage: python bench/bench_one_port.py [--seconds 3] [--rounds 2] [--concurrency 4]
"""

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import tritonclient.grpc as grpcclient  # noqa: E402

from scratch import scratch_dir  # noqa: E402
from support import programs  # noqa: E402
from support.server import ServerProcess, upload  # noqa: E402


def _caller(url: str, model: str, x: np.ndarray):
    client = grpcclient.InferenceServerClient(url)
    tensor = grpcclient.InferInput("input_0", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x)

    def call():
        return client.infer(model, [tensor]).as_numpy("output_0")

    return call


def measure(url: str, model: str, x: np.ndarray, clients: int, seconds: float) -> list[float]:
    """Latencies of every request `clients` clients (threads) made in `seconds`."""
    calls = [_caller(url, model, x) for _ in range(clients)]
    for call in calls:
        call()
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    def run(call):
        mine = []
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            call()
            mine.append(time.perf_counter() - start)
        latencies.extend(mine)

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--programs-dir", type=Path, default=None)
    args = parser.parse_args()
    scratch = scratch_dir("bench-one-port-")
    made = args.programs_dir or scratch / "programs"
    tiny, image = programs.export_linear_relu(made), programs.export_image(made)
    cases = {
        "tiny 2x4": ("tiny", tiny.example_inputs[0].numpy()),
        "image 1x3x224x224": ("image", image.example_inputs[0].numpy()),
    }
    with ServerProcess(scratch / "artifacts", "--log-level", "warning", "--one-port") as server:
        with server.client() as client:
            assert upload(client, "tiny", tiny.pte).status_code == 201
            assert upload(client, "image", image.pte).status_code == 201
        paths = {"direct": server.grpc_url, "relay": f"127.0.0.1:{server.port}"}
        for model, x in cases.values():  # both paths give the same answer
            answers = [_caller(url, model, x)() for url in paths.values()]
            np.testing.assert_array_equal(answers[0], answers[1])
        print(f"{'case':<18} {'clients':>7} {'path':<7} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7}")
        for case, (model, x) in cases.items():
            for clients in (1, args.concurrency):
                got: dict[str, list[float]] = {path: [] for path in paths}
                for _ in range(args.rounds):
                    for path, url in paths.items():
                        got[path] += measure(url, model, x, clients, args.seconds)
                rates = {path: len(lat) / (args.seconds * args.rounds) for path, lat in got.items()}
                for path, latencies in got.items():
                    ms = np.percentile(np.array(latencies) * 1000, [50, 99])
                    print(
                        f"{case:<18} {clients:>7} {path:<7} {rates[path]:>8.1f} "
                        f"{ms[0]:>7.2f} {ms[1]:>7.2f}"
                    )
                ratio = rates["relay"] / rates["direct"]
                print(f"{case:<18} {clients:>7} relay/direct throughput: {ratio:.3f}")


if __name__ == "__main__":
    main()
