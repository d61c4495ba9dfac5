"""A real program with a delegate (XNNPACK's) that our native host has no backend for.

It is a valid program whose load fails, which is exactly what the isolated load check must turn
into a refusal, and it gives program inspection a real delegate blob to read.
"""
from pathlib import Path


def export_xnnpack_linear(out_dir: Path) -> Path:
    path = Path(out_dir) / "xnnpack_linear.pte"
    if path.exists():
        return path
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()
    exported = torch.export.export(model, (torch.randn(2, 4),))
    program = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    path.write_bytes(program.to_executorch().buffer)
    return path
