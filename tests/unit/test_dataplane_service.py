"""The protocol-neutral core, driven through the real app (real storage, native host, ingest)."""

import threading

from fastapi.testclient import TestClient

from service.config import Settings
from service.front.app import create_app
from support.program_fixtures import linear_relu_program  # noqa: F401


def _upload(client, name, program):
    with open(program.pte, "rb") as pte:
        return client.post(
            "/models",
            data={"name": name, "replace": "true"},
            files={"program": ("model.pte", pte.read())},
        )


def test_a_deleted_names_lock_is_kept_for_whoever_waits_on_it(tmp_path, linear_relu_program):
    # A deploy waiting on the name's lock during a delete must still exclude the next deploy of
    # that name: the lock object has to outlive the delete.
    app = create_app(Settings(artifacts=tmp_path / "artifacts", grpc_port=0))
    with TestClient(app) as client:
        assert _upload(client, "m", linear_relu_program).status_code == 201
        service = app.state.service
        lock = service._lock("m")
        assert client.delete("/models/m").status_code == 204
        assert service._lock("m") is lock


def test_at_most_the_configured_number_of_uploads_are_checked_at_once(
    tmp_path, monkeypatch, linear_relu_program
):
    # Ingest runs on threads of its own, bounded, so slow load checks queue there instead of
    # taking the threads that parse other requests.
    import service.dataplane.deployment as core

    running, most, lock = 0, 0, threading.Lock()
    real = core.run_ingest

    def counted(*args):
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        try:
            return real(*args)
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(core, "run_ingest", counted)
    app = create_app(
        Settings(artifacts=tmp_path / "artifacts", grpc_port=0, max_concurrent_ingests=1)
    )
    with TestClient(app) as client:
        threads = [
            threading.Thread(target=_upload, args=(client, f"m{i}", linear_relu_program))
            for i in range(3)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(m["name"] for m in client.get("/models").json()) == ["m0", "m1", "m2"]
    assert most == 1


def test_model_ready_reads_no_memory_map(tmp_path, monkeypatch, linear_relu_program):
    # Fronts call model_ready for every request whose model their table does not list yet: it
    # must stay a lookup. A description reads /proc/self/smaps, milliseconds per call on a CUDA
    # host; under load those calls took the engine's thread from its inference.
    import service.dataplane.residency as residency
    from service.errors import NotFound

    app = create_app(Settings(artifacts=tmp_path / "artifacts", grpc_port=0))
    with TestClient(app) as client:
        assert _upload(client, "m", linear_relu_program).status_code == 201
        service = app.state.service
        read = []
        monkeypatch.setattr(residency, "mapped_files", lambda: read.append(1) or {})

        async def ask():
            answers = [await service.model_ready("m"), await service.model_ready("m", "1")]
            for name, version in (("nobody", None), ("m", "7")):
                try:
                    await service.model_ready(name, version)
                except NotFound as exc:
                    answers.append(exc.message)
            return answers

        answers = client.portal.call(ask)
        assert answers[:2] == [True, True]
        assert "'nobody' not found" in answers[2] and "7" in answers[3]
        assert read == []
        assert client.get("/models/m").status_code == 200 and read  # descriptions still read it
