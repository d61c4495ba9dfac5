"""A real program whose method is delegated to XNNPACK, ExecuTorch's CPU backend.

Served by the xnnpack backend (service.backends.xnnpack); a server or check child without that
backend registered cannot load it, which is what the load step must turn into a refusal. It also
gives program inspection a real delegate blob to read.
"""

from pathlib import Path


def xnnpack_linear_model():
    """The eager model the program is exported from (same seed, same weights every time)."""
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()).eval()


def export_xnnpack_linear(out_dir: Path) -> Path:
    path = Path(out_dir) / "xnnpack_linear.pte"
    if path.exists():
        return path
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    exported = torch.export.export(xnnpack_linear_model(), (torch.randn(2, 4),))
    program = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    path.write_bytes(program.to_executorch().buffer)
    return path


def serve_xnnpack_linear(client, programs_dir: Path, x) -> dict:
    """Deploys the program as "xnn" through `client` (a server's or a container's), checks that
    its method is delegated to XNNPACK, and returns the one output /infer gives for `x`."""
    from support.server import tensor, upload

    response = upload(client, "xnn", export_xnnpack_linear(programs_dir))
    assert response.status_code == 201, response.text
    [method] = response.json()["methods"]
    assert [d["backend"] for d in method["delegates"]] == ["XnnpackBackend"]
    response = client.post("/infer", json={"model": "xnn", "inputs": [tensor(x)]})
    assert response.status_code == 200, response.text
    [output] = response.json()["outputs"]
    return output
