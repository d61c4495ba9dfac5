"""What docs/deploying.md ("Which .ptd belongs to which program") says, as `etrt check` (the
server's own ingest) finds it: nothing in the files ties a .ptd to its export, so a .ptd from
another export of the same model is accepted, while one whose tensors do not fit the program is
refused with ExecuTorch's reason, naming the files as the user has them."""

from pathlib import Path

import pytest

from support.cli import etrt

pytestmark = pytest.mark.slow  # exports three programs


def _export(folder: Path, out_features: int, seed: int) -> Path:
    import torch
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, out_features), torch.nn.ReLU()).eval()
    edge = to_edge_transform_and_lower(torch.export.export(model, (torch.randn(1, 4),)))
    program = edge.to_executorch(ExecutorchBackendConfig(external_constants=True))
    folder.mkdir()
    program.save(str(folder / "model.pte"))
    program.write_tensor_data_to_file(str(folder))
    return folder


def test_what_is_and_is_not_detected_about_a_ptd(tmp_path):
    first, second = _export(tmp_path / "a", 3, 0), _export(tmp_path / "b", 3, 1)
    wider = _export(tmp_path / "c", 5, 0)
    data = "_default_external_constant.ptd"
    # Two exports with other weights: the same program, byte for byte; the data files differ.
    assert (first / "model.pte").read_bytes() == (second / "model.pte").read_bytes()
    assert (first / data).read_bytes() != (second / data).read_bytes()
    mixed = etrt("check", "--json", first / "model.pte", second / data)
    assert mixed.code == 0, mixed.out + mixed.err  # not detectable: accepted
    misfit = etrt("check", "--json", first / "model.pte", wider / data)
    assert misfit.code == 1, misfit.out + misfit.err
    [problem] = misfit.json()["problems"]
    assert problem["rule"] == "program.load_failed" and problem["file"] == "model.pte"
    assert "Sizes mismatch" in problem["message"] and f"'{data}'" in problem["message"]
