"""Weights resident once: a model's .ptd is mapped by the process that serves it, not copied, so
its first inference grows that process by about the .ptd's size; and the model description and
/metrics say where a model's bytes are (mapped file pages vs. planned arenas), which shows a
program that copies its weights itself (nn.Linear lowered to permute_copy) for what it is."""

from pathlib import Path

import numpy as np
import pytest
import torch

from support import programs, prometheus
from support.program_fixtures import linear_relu_program  # noqa: F401
from support.server import tensor, upload


@pytest.fixture(scope="module")
def folded_weights(programs_dir):
    return programs.export_large_weights(programs_dir, fold_constants=True)


@pytest.fixture(scope="module")
def copied_weights(programs_dir):
    return programs.export_large_weights(programs_dir, fold_constants=False)


def _family(pid: int) -> list[int]:
    """The process and its descendants (an engine process may be a child of the server)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            children = (task / "children").read_text().split()
            pending += [int(c) for c in children]
    return found


def _rss(pid: int) -> int:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) * 1024
    return fields["RssAnon"] + fields["RssFile"]


def _holder(pid: int, model_dir: Path) -> int:
    """The process that maps the model's stored files."""
    holders = [p for p in _family(pid) if str(model_dir) in Path(f"/proc/{p}/maps").read_text()]
    assert len(holders) == 1, f"processes mapping {model_dir}: {holders}"
    return holders[0]


def _deploy_and_infer(client, name: str, exported) -> dict:
    response = upload(client, name, exported.pte, exported.ptds)
    assert response.status_code == 201, response.text
    x = np.ones((1, programs.LARGE_WEIGHTS_WIDTH), np.float32)
    inferred = client.post("/infer", json={"model": name, "inputs": [tensor(x)]})
    assert inferred.status_code == 200, inferred.text
    expected = exported.module(torch.from_numpy(x)).detach().numpy()
    got = np.array(inferred.json()["outputs"][0]["data"], np.float32).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    return client.get(f"/models/{name}").json()


def _model_dir(server, name: str) -> Path:
    [directory] = (server.artifacts / "models").resolve().glob(f"{name}.*")
    return directory


def test_first_inference_grows_the_holder_by_the_ptd_size_once(
    start_server, folded_weights, linear_relu_program
):
    server = start_server()
    ptd_size = folded_weights.ptds[0].stat().st_size
    with server.client() as client:
        # Warm up the paths a first deploy and request take (imports, allocator pools), so the
        # growth measured below is the model's own.
        warm = upload(client, "warm", linear_relu_program.pte)
        assert warm.status_code == 201, warm.text
        x = np.ones((2, 4), np.float32)
        assert client.post("/infer", json={"model": "warm", "inputs": [tensor(x)]}).is_success
        before = {pid: _rss(pid) for pid in _family(server.process.pid)}

        described = _deploy_and_infer(client, "weights", folded_weights)
        holder = _holder(server.process.pid, _model_dir(server, "weights"))
        growth = _rss(holder) - before.get(holder, 0)
        assert growth <= 1.1 * ptd_size, f"grew {growth} bytes for a {ptd_size}-byte .ptd"

        memory = described["memory"]
        # The inference read every weight where it is mapped, and copied none of them.
        assert memory["mapped_files_resident_bytes"] >= 0.95 * ptd_size, memory
        assert memory["planned_arena_resident_bytes"] < 0.01 * ptd_size, memory
        assert memory["resident_bytes"] == (
            memory["mapped_files_resident_bytes"] + memory["planned_arena_resident_bytes"]
        )
        metrics = prometheus.parse(client.get("/metrics").text)
        files = prometheus.value(
            metrics, "etrt_model_resident_bytes", model="weights", memory="files"
        )
        assert files is not None and files >= 0.95 * ptd_size
        arena = prometheus.value(metrics, "etrt_model_planned_arena_bytes", model="weights")
        assert arena == memory["planned_arena_bytes"]


def test_a_program_that_copies_its_weights_shows_the_copy_in_its_arenas(
    start_server, copied_weights
):
    """ExecuTorch's lowering of nn.Linear transposes the weight into a planned tensor at every
    execute: the weight is then resident twice, and the description says where."""
    server = start_server()
    ptd_size = copied_weights.ptds[0].stat().st_size
    with server.client() as client:
        described = _deploy_and_infer(client, "copies", copied_weights)
        memory = described["memory"]
        assert memory["mapped_files_resident_bytes"] >= 0.95 * ptd_size, memory
        assert memory["planned_arena_resident_bytes"] >= 0.95 * ptd_size, memory
        assert memory["planned_arena_bytes"] >= ptd_size - 4096, memory
        metrics = prometheus.parse(client.get("/metrics").text)
        arenas = prometheus.value(
            metrics, "etrt_model_resident_bytes", model="copies", memory="planned_arenas"
        )
        assert arenas is not None and arenas >= 0.95 * ptd_size
        # Deleting the model takes its series with it.
        assert client.delete("/models/copies").is_success
        after = prometheus.parse(client.get("/metrics").text)
        assert not prometheus.series(after, "etrt_model_planned_arena_bytes")
