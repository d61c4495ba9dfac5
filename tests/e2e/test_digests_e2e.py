"""Every stored file is checked against the sha-256 recorded at ingest before it loads: a byte
flipped in a stored .ptd (same size, as bit rot leaves it) makes that model unavailable with the
reason after a restart -- in its description, readiness, the log and /metrics -- while every
other model serves."""

from pathlib import Path

import pytest
import torch

from support import prometheus
from support.program_fixtures import external_weights_program, linear_relu_program  # noqa: F401
from support.server import ServerProcess, tensor, upload


@pytest.fixture
def server(tmp_path):
    started = ServerProcess(tmp_path / "artifacts").start()
    yield started
    started.stop()


def infer(client, model, program):
    return client.post(
        "/infer", json={"model": model, "inputs": [tensor(x) for x in program.example_inputs]}
    )


def digest_checks(client) -> dict:
    samples = prometheus.parse(client.get("/metrics").text)["samples"]
    return {
        (labels["model"], labels["outcome"]): value
        for (name, label_set), value in samples.items()
        if name == "etrt_model_digest_checks_total"
        for labels in [dict(label_set)]
    }


def flip_a_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_flipped_byte_in_a_stored_ptd_keeps_that_model_from_loading(
    server, external_weights_program, linear_relu_program
):
    [weights] = external_weights_program.ptds
    with server.client() as client:
        for name, program, data in (
            ("weights", external_weights_program, [weights]),
            ("other", linear_relu_program, []),
        ):
            response = upload(client, name, program.pte, data)
            assert response.status_code == 201, response.text
            assert infer(client, name, program).status_code == 200
        assert digest_checks(client)[("weights", "ok")] >= 1
    [stored] = list((server.artifacts / "models").rglob(weights.name))
    flip_a_byte(stored, stored.stat().st_size - 8)  # in the tensor data, size unchanged

    server.restart()
    with server.client() as client:
        description = client.get("/models/weights").json()
        assert description["state"] == "unavailable"
        assert (
            f"stored file {weights.name!r} is not the file that was uploaded"
            in (description["error"])
        )
        assert "bit rot or an edit" in description["error"]
        assert client.get("/v2/models/weights/ready").status_code == 503
        refused = infer(client, "weights", external_weights_program)
        assert refused.status_code == 503, refused.text
        assert "is not the file that was uploaded" in refused.json()["error"]
        assert digest_checks(client)[("weights", "mismatch")] == 1
        # Every other model serves, and so does the server.
        assert client.get("/models/other").json()["state"] == "ready"
        answer = infer(client, "other", linear_relu_program)
        assert answer.status_code == 200, answer.text
        expected = linear_relu_program.module(*linear_relu_program.example_inputs)
        got = torch.tensor(answer.json()["outputs"][0]["data"]).reshape(expected.shape)
        torch.testing.assert_close(got, expected.detach(), rtol=1e-5, atol=1e-6)
        assert client.get("/health/ready").status_code == 200
        assert digest_checks(client)[("other", "ok")] >= 1
    assert f"model weights version 1 is unavailable: stored file {weights.name!r}" in server.log()


def test_restoring_the_file_serves_the_model_again(server, external_weights_program):
    [weights] = external_weights_program.ptds
    with server.client() as client:
        assert upload(client, "weights", external_weights_program.pte, [weights]).status_code == 201
    [stored] = list((server.artifacts / "models").rglob(weights.name))
    original = stored.read_bytes()
    flip_a_byte(stored, len(original) - 8)
    server.restart()
    with server.client() as client:
        assert client.get("/models/weights").json()["state"] == "unavailable"
    stored.write_bytes(original)
    server.restart()
    with server.client() as client:
        assert client.get("/models/weights").json()["state"] == "ready"
        assert infer(client, "weights", external_weights_program).status_code == 200


def test_a_repository_load_verifies_the_files_again(server, external_weights_program):
    # No restart: unload, damage the file, load. The load is refused with the reason, and
    # restoring the file lets the next load serve it.
    [weights] = external_weights_program.ptds
    with server.client() as client:
        assert upload(client, "weights", external_weights_program.pte, [weights]).status_code == 201
        assert client.post("/v2/repository/models/weights/unload").status_code == 200
        [stored] = list((server.artifacts / "models").rglob(weights.name))
        original = stored.read_bytes()
        flip_a_byte(stored, len(original) - 8)
        refused = client.post("/v2/repository/models/weights/load")
        assert refused.status_code == 503, refused.text
        assert "model 'weights' cannot be loaded: stored file" in refused.json()["error"]
        assert digest_checks(client)[("weights", "mismatch")] == 1
        stored.write_bytes(original)
        assert client.post("/v2/repository/models/weights/load").status_code == 200
        assert infer(client, "weights", external_weights_program).status_code == 200
