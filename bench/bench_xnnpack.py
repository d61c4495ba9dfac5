"""Portable CPU kernels vs XNNPACK on one ResNet-18 (1x3x224x224 FP32), on the native host.

The README's CPU export recipe lowers to XNNPACK; this is the figure behind that choice. The
same eager network (ResNet-18's layout, random weights: speed does not depend on them) is
exported twice, without a partitioner (ExecuTorch's portable kernels, the baseline) and with
XnnpackPartitioner, weights in a .ptd each time, and each program is executed on `ethost` as the
server runs it (one instance, kernel thread pool as the server's default leaves it). Both outputs
are compared with eager PyTorch.

usage: python bench/bench_xnnpack.py [--runs 10] [--portable-runs 2] [--out DIR]
(needs the test extra: torch 2.13 and executorch's exporter)
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from scratch import scratch_dir

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def resnet18():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, inputs, outputs, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(outputs)
            self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(outputs)
            self.shortcut = (
                nn.Sequential(
                    nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs)
                )
                if stride != 1 or inputs != outputs
                else nn.Identity()
            )

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))

    layers = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]
    width = 64
    for outputs, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(width, outputs, stride), Block(outputs, outputs, 1)]
        width = outputs
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
    torch.manual_seed(0)
    return nn.Sequential(*layers).eval()


def export(model, example, out: Path, xnnpack: bool) -> tuple[Path, list[Path]]:
    import torch
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    partitioner = []
    if xnnpack:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        partitioner = [XnnpackPartitioner()]
    out.mkdir(parents=True, exist_ok=True)
    edge = to_edge_transform_and_lower(torch.export.export(model, example), partitioner=partitioner)
    program = edge.to_executorch(ExecutorchBackendConfig(external_constants=True))
    program.save(str(out / "model.pte"))
    program.write_tensor_data_to_file(str(out))
    return out / "model.pte", sorted(out.glob("*.ptd"))


def time_execute(
    pte: Path, ptds: list[Path], x: np.ndarray, runs: int
) -> tuple[list[float], np.ndarray]:
    from service.native_host import import_host

    ethost = import_host(("service.backends.xnnpack:install_backend",))
    method = ethost.Program(str(pte), [str(p) for p in ptds]).load_method("forward")
    result = method.execute([x])[0]  # warm-up (XNNPACK packs weights on the first call)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        method.execute([x])
        times.append(time.perf_counter() - start)
    return times, result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--portable-runs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import torch

    out = args.out or scratch_dir("bench-xnnpack-")
    model = resnet18()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(x).numpy()
    figures = {}
    for label, xnnpack, runs in (
        ("portable", False, args.portable_runs),
        ("xnnpack", True, args.runs),
    ):
        start = time.perf_counter()
        pte, ptds = export(model, (x,), out / label, xnnpack)
        exported = time.perf_counter() - start
        times, result = time_execute(pte, ptds, x.numpy(), runs)
        error = float(np.max(np.abs(result - expected)))
        figures[label] = median = statistics.median(times)
        print(
            f"{label:9s} export {exported:6.1f} s, execute median {median * 1e3:9.1f} ms "
            f"(min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}, {runs} runs), "
            f"max |out - eager| {error:.2e}"
        )
    print(
        f"XNNPACK is {figures['portable'] / figures['xnnpack']:.0f}x faster than portable kernels"
    )


if __name__ == "__main__":
    main()
