"""The dataplane's repository calls (load, unload, index) and the staging every transport uses,
on a real ModelService (real storage, ingest and native host)."""

import asyncio

import pytest

from service.config import Settings
from service.dataplane.service import ModelService
from service.errors import Invalid, NotFound, TooLarge, Unavailable
from service.ingest.staging import Staging
from service.store.storage import Storage
from support.program_fixtures import external_weights_program, linear_relu_program  # noqa: F401


def leftovers(root):
    return sorted(p.name for p in (root / "staging").iterdir())


@pytest.fixture
def run(tmp_path):
    """run(coroutine_function(service)) on a service started over tmp_path/artifacts (each call
    is a fresh start of the same store, as a restart)."""

    def run(body, **settings):
        async def main():
            service = ModelService(Settings(artifacts=tmp_path / "artifacts", **settings))
            await service.start()
            try:
                return await body(service)
            finally:
                await service.stop()

        return asyncio.run(main())

    return run


def test_load_with_files_ingests_and_serves(run, tmp_path, external_weights_program):
    [weights] = external_weights_program.ptds
    files = {
        "1/model.pte": external_weights_program.pte.read_bytes(),
        f"1/{weights.name}": weights.read_bytes(),
    }

    async def body(service):
        description = await service.load_model("m", files, {"max_batch_size": 0})
        assert description["state"] == "ready" and description["config"] == {"max_batch_size": 0}
        assert [f["name"] for f in description["files"]] == ["model.pte", weights.name]
        return await service.repository_index()

    assert run(body) == [{"name": "m", "version": "1", "state": "READY", "reason": ""}]
    assert leftovers(tmp_path / "artifacts") == []


def test_load_refusals_are_ingest_refusals_and_leave_nothing(
    run, tmp_path, external_weights_program
):
    async def body(service):
        with pytest.raises(Invalid) as missing_data:
            await service.load_model(
                "m", {"1/model.pte": external_weights_program.pte.read_bytes()}
            )
        with pytest.raises(Invalid) as bad_keys:
            await service.load_model(
                "m", {"0/model.pte": b"x", "1/notes.txt": b"x", "1/a.pte": b"x", "1/b.pte": b"x"}
            )
        with pytest.raises(Invalid) as bad_name:
            await service.load_model("bad name!", {"1/model.pte": b"not a program"})
        return missing_data.value, bad_keys.value, bad_name.value, await service.repository_index()

    missing_data, bad_keys, bad_name, index = run(body)
    assert [p.rule for p in missing_data.problems] == ["external.missing_key"]
    assert [p.rule for p in bad_keys.problems] == [
        "load.file_path",
        "load.file_kind",
        "upload.program_count",
    ]
    assert {p.rule for p in bad_name.problems} == {"model.characters", "program.invalid"}
    assert index == []
    assert leftovers(tmp_path / "artifacts") == []
    assert list((tmp_path / "artifacts" / "models").iterdir()) == []


def test_unload_keeps_the_model_and_load_serves_it_again(run, linear_relu_program):
    files = {"1/model.pte": linear_relu_program.pte.read_bytes()}

    async def body(service):
        await service.load_model("m", files)
        await service.unload_model("m")
        unloaded = await service.repository_index()
        with pytest.raises(Unavailable, match="unloaded"):
            from service.dataplane.types import InferRequest

            await service.infer(InferRequest("m", []))
        described = await service.describe("m")
        again = await service.load_model("m")
        with pytest.raises(NotFound):
            await service.load_model("nobody")
        with pytest.raises(NotFound):
            await service.unload_model("nobody")
        return unloaded, described, again, await service.repository_index()

    unloaded, described, again, index = run(body)
    assert unloaded == [{"name": "m", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}]
    assert described["state"] == "unavailable" and described["error"] == "unloaded"
    assert again["state"] == "ready"
    assert index == [{"name": "m", "version": "1", "state": "READY", "reason": ""}]


def test_an_unloaded_model_stays_unloaded_across_a_restart(run, linear_relu_program):
    async def unload(service):
        await service.load_model("m", {"1/model.pte": linear_relu_program.pte.read_bytes()})
        await service.unload_model("m")

    async def restarted(service):
        index = await service.repository_index()
        await service.load_model("m")
        return index

    run(unload)
    assert run(restarted) == [
        {"name": "m", "version": "1", "state": "UNAVAILABLE", "reason": "unloaded"}
    ]
    assert run(lambda service: service.repository_index()) == [
        {"name": "m", "version": "1", "state": "READY", "reason": ""}
    ]


def test_load_with_only_a_config_reingests_the_stored_files(run, linear_relu_program):
    async def body(service):
        await service.load_model("m", {"1/model.pte": linear_relu_program.pte.read_bytes()})
        return await service.load_model("m", config={"instance_group": [{"count": 1}]})

    description = run(body)
    assert description["state"] == "ready"
    assert description["config"] == {"instance_group": [{"count": 1}]}
    assert description["files"][0]["name"] == "model.pte"


def test_staging_limits_digests_and_abort(tmp_path):
    storage = Storage(tmp_path)
    staging = Staging(storage, Settings(max_program_bytes=4, max_data_files=1))
    staged = staging.add_file("program", "m.pte", [b"ab", b"cd"])
    assert staged.size == 4 and len(staged.sha256) == 64
    staging.add_file("data", "a.ptd", [b"x"])
    with pytest.raises(TooLarge, match="more than 1 data files"):
        staging.add_file("data", "b.ptd", [b"x"])
    staging.abort()
    assert leftovers(tmp_path) == []
    staging = Staging(storage, Settings(max_program_bytes=4))
    with pytest.raises(TooLarge, match="'m.pte' is larger than the limit of 4 bytes"):
        staging.add_file("program", "m.pte", [b"abc", b"de"])
    staging.abort()
    assert leftovers(tmp_path) == []
