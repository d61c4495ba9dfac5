import hashlib
import json
import sqlite3

import pytest

from service.store.records import ModelDescription, StoredFile
from service.store.storage import (
    PROGRAM_FILE,
    REGISTRY,
    SCHEMA_VERSION,
    NameTaken,
    RegistryCorrupt,
    RegistryTooNew,
    Storage,
)


def _stage(storage, content=b"program", data=None):
    staged = storage.new_staging_dir()
    (staged / PROGRAM_FILE).write_bytes(content)
    files = [StoredFile("m.pte", "program", len(content), hashlib.sha256(content).hexdigest())]
    for name, payload in (data or {}).items():
        (staged / name).write_bytes(payload)
        files.append(StoredFile(name, "data", len(payload), ""))
    return staged, ModelDescription("m", tuple(files), ())


def all_files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def rows(root):
    with sqlite3.connect(root / REGISTRY) as db:
        return db.execute("SELECT name, directory FROM models").fetchall()


def test_commit_moves_files_into_a_model_directory_and_registers(tmp_path):
    storage = Storage(tmp_path)
    staged, description = _stage(storage, data={"engines.ptd": b"E"})
    stored, replaced = storage.commit("m", staged, description, replace=False)
    assert replaced is None and not staged.exists()
    assert stored.program_path.read_bytes() == b"program"
    assert [p.read_bytes() for p in stored.data_paths] == [b"E"]
    assert stored.directory.parent == tmp_path / "models"
    assert rows(tmp_path) == [("m", stored.directory.name)] and stored.version == 1
    again = Storage(tmp_path).get("m")
    assert again.description == description and again.directory == stored.directory


def test_two_models_never_share_a_data_file(tmp_path):
    storage = Storage(tmp_path)
    a, _ = storage.commit("a", *_stage(storage, data={"engines.ptd": b"A"}), replace=False)
    b, _ = storage.commit("b", *_stage(storage, data={"engines.ptd": b"B"}), replace=False)
    assert a.data_paths[0] != b.data_paths[0]
    assert a.data_paths[0].read_bytes() == b"A" and b.data_paths[0].read_bytes() == b"B"


def test_name_taken_leaves_no_file_and_keeps_the_old_model(tmp_path):
    storage = Storage(tmp_path)
    first, _ = storage.commit("m", *_stage(storage, b"one"), replace=False)
    staged, description = _stage(storage, b"two")
    with pytest.raises(NameTaken):
        storage.commit("m", staged, description, replace=False)
    assert all_files(tmp_path) == sorted([REGISTRY, str(first.program_path.relative_to(tmp_path))])
    assert storage.get("m").program_path.read_bytes() == b"one"


def test_replace_switches_the_row_and_keeps_the_old_files_until_removed(tmp_path):
    storage = Storage(tmp_path)
    first, _ = storage.commit("m", *_stage(storage, b"one"), replace=False)
    second, replaced = storage.commit("m", *_stage(storage, b"two"), replace=True)
    assert replaced.directory == first.directory and first.program_path.exists()
    assert storage.get("m").program_path.read_bytes() == b"two"
    storage.remove_directory(replaced)
    assert not first.directory.exists() and len(rows(tmp_path)) == 1


def test_rollback_undoes_a_replace(tmp_path):
    storage = Storage(tmp_path)
    first, _ = storage.commit("m", *_stage(storage, b"one"), replace=False)
    second, replaced = storage.commit("m", *_stage(storage, b"two"), replace=True)
    storage.rollback([second], [replaced])
    assert storage.get("m").directory == first.directory and not second.directory.exists()


def test_unregister_then_remove_leaves_only_the_registry(tmp_path):
    storage = Storage(tmp_path)
    stored, _ = storage.commit("m", *_stage(storage, data={"w.ptd": b"W"}), replace=False)
    assert [m.directory for m in storage.unregister("m")] == [stored.directory]
    storage.remove_directory(stored)
    assert all_files(tmp_path) == [REGISTRY] and rows(tmp_path) == []
    assert storage.unregister("m") == []


def test_reconcile_removes_leftovers_and_rows_whose_files_are_gone(tmp_path):
    storage = Storage(tmp_path)
    kept, _ = storage.commit("kept", *_stage(storage), replace=False)
    broken, _ = storage.commit("broken", *_stage(storage, data={"w.ptd": b"W"}), replace=False)
    resized, _ = storage.commit("resized", *_stage(storage), replace=False)
    (broken.directory / "w.ptd").unlink()
    resized.program_path.write_bytes(b"changed size")
    unfinished = storage.new_staging_dir()
    (unfinished / "part-0").write_bytes(b"half an upload")
    orphan = tmp_path / "models" / "ghost.0123"
    orphan.mkdir()
    (orphan / PROGRAM_FILE).write_bytes(b"no row points here")
    (tmp_path / "models" / "stray-file").write_bytes(b"x")

    served = Storage(tmp_path).reconcile()

    assert [m.name for m in served] == ["kept"]
    assert [r[0] for r in rows(tmp_path)] == ["kept"]
    assert all_files(tmp_path) == sorted([REGISTRY, str(kept.program_path.relative_to(tmp_path))])
    assert list((tmp_path / "staging").iterdir()) == []


# --- the registry's form is versioned; rows written by the release before are migrated ---------


def _old_registry(root, rows):
    """A registry exactly as the release before versioning wrote it: no user_version, rows
    holding the API's description dict (with "state", "runnable", "unavailable_reason")."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "models").mkdir(exist_ok=True)
    with sqlite3.connect(root / REGISTRY) as db:
        db.execute(
            "CREATE TABLE IF NOT EXISTS models (name TEXT PRIMARY KEY, "
            "directory TEXT NOT NULL, description TEXT NOT NULL, "
            "created_at REAL NOT NULL)"
        )
        for name, description in rows:
            (root / "models" / f"{name}.old").mkdir()
            (root / "models" / f"{name}.old" / PROGRAM_FILE).write_bytes(b"program")
            db.execute(
                "INSERT INTO models VALUES (?, ?, ?, 0)",
                (name, f"{name}.old", json.dumps(description)),
            )
    db.close()


def _old_description(name, **extra):
    return {
        "name": name,
        "state": "ready",
        "runnable": True,
        "warnings": ["w"],
        "files": [{"name": "m.pte", "role": "program", "bytes": 7, "sha256": "ab"}],
        "methods": [{"name": "forward", "inputs": [], "outputs": []}],
        **extra,
    }


def test_a_registry_written_before_versioning_is_migrated(tmp_path):
    _old_registry(
        tmp_path,
        [
            ("ready", _old_description("ready")),
            (
                "stored",
                _old_description(
                    "stored", state="unavailable", runnable=False, unavailable_reason="no GPU here"
                ),
            ),
        ],
    )
    storage = Storage(tmp_path)
    ready, stored = storage.reconcile()
    assert ready.description.runnable and ready.description.warnings == ("w",)
    assert ready.description.files == (StoredFile("m.pte", "program", 7, "ab"),)
    assert ready.description.methods[0]["name"] == "forward"
    assert stored.description.not_runnable == "no GPU here"
    with sqlite3.connect(tmp_path / REGISTRY) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        [text] = db.execute("SELECT description FROM models WHERE name = 'stored'").fetchone()
    assert "runnable" not in json.loads(text) and json.loads(text)["not_runnable"] == "no GPU here"
    # Opening it again reads the records as they are.
    assert Storage(tmp_path).get("stored").description == stored.description
    assert storage.unloaded() == set()
    storage.set_unloaded("ready", True)
    assert Storage(tmp_path).unloaded() == {("ready", 1)}


def test_a_new_upload_of_an_unloaded_name_is_served(tmp_path):
    storage = Storage(tmp_path)
    storage.commit("m", *_stage(storage), replace=False)
    storage.set_unloaded("m", True)
    storage.commit("m", *_stage(storage, b"two"), replace=True)
    assert storage.unloaded() == set()


def test_a_registry_from_a_newer_release_is_refused(tmp_path):
    Storage(tmp_path)
    with sqlite3.connect(tmp_path / REGISTRY) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(RegistryTooNew, match="newer release"):
        Storage(tmp_path)


def test_the_migration_is_logged_only_when_something_migrated(tmp_path, caplog):
    _old_registry(tmp_path / "old", [("m", _old_description("m"))])
    with caplog.at_level("INFO", logger="service.store.storage"):
        Storage(tmp_path / "old")
    assert [r.getMessage() for r in caplog.records if "migrated" in r.getMessage()] == [
        f"registry migrated from schema 0 to {SCHEMA_VERSION}"
    ]
    caplog.clear()
    with caplog.at_level("INFO", logger="service.store.storage"):
        Storage(tmp_path / "old")  # already at the current schema
        Storage(tmp_path / "new")  # created at it
        Storage(tmp_path / "new")
    assert not [r for r in caplog.records if "migrated" in r.getMessage()]


# --- versions: one row per model version (schema 3) -------------------------------------------


def test_versions_of_a_model_are_rows_of_their_own(tmp_path):
    storage = Storage(tmp_path)
    one, _ = storage.commit("m", *_stage(storage, b"one"), replace=False)
    two, replaced = storage.commit("m", *_stage(storage, b"two"), replace=False, version=2)
    assert replaced is None and (one.version, two.version) == (1, 2)
    assert one.directory != two.directory and one.program_path.read_bytes() == b"one"
    assert storage.get("m").version == 2 and storage.get("m", 1).directory == one.directory
    with pytest.raises(NameTaken):
        storage.commit("m", *_stage(storage, b"again"), replace=False, version=2)
    assert [m.version for m in Storage(tmp_path).reconcile()] == [1, 2]
    storage.set_unloaded("m", True, version=1)
    assert storage.unloaded() == {("m", 1)}
    assert [m.version for m in storage.unregister("m", 1)] == [1]
    assert [(m.name, m.version) for m in storage.all()] == [("m", 2)]


def test_an_exclusive_commit_makes_the_model_exactly_its_versions_in_one_transaction(tmp_path):
    storage = Storage(tmp_path)
    old = [storage.commit("m", *_stage(storage, b"v%d" % v), False, version=v)[0] for v in (1, 2)]
    staged = {v: _stage(storage, b"new%d" % v) for v in (2, 3)}
    new, displaced = storage.commit_versions("m", staged, replace=True, exclusive=True)
    assert [m.version for m in new] == [2, 3]
    assert [m.directory for m in displaced] == [m.directory for m in old]
    assert [(m.version, m.program_path.read_bytes()) for m in storage.all()] == [
        (2, b"new2"),
        (3, b"new3"),
    ]
    storage.rollback(new, displaced)  # as if version 3 could not be opened
    assert [(m.version, m.program_path.read_bytes()) for m in storage.all()] == [
        (1, b"v1"),
        (2, b"v2"),
    ]
    assert not any(m.directory.exists() for m in new)


def test_a_commit_that_fails_in_its_transaction_leaves_no_version_behind(tmp_path):
    storage = Storage(tmp_path)
    storage.commit("m", *_stage(storage, b"one"), replace=False)
    staged = {v: _stage(storage, b"x") for v in (1, 2)}  # 1 is taken
    with pytest.raises(NameTaken):
        storage.commit_versions("m", staged, replace=False)
    assert [m.version for m in storage.all()] == [1]
    assert len(list((tmp_path / "models").iterdir())) == 1


def _schema_2_registry(root, rows):
    """A registry exactly as schema 2 wrote it: one row per model, keyed by name."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "models").mkdir(exist_ok=True)
    with sqlite3.connect(root / REGISTRY) as db:
        db.execute(
            "CREATE TABLE models (name TEXT PRIMARY KEY, directory TEXT NOT NULL, "
            "description TEXT NOT NULL, created_at REAL NOT NULL, "
            "unloaded INTEGER NOT NULL DEFAULT 0)"
        )
        for name, unloaded in rows:
            folder = root / "models" / f"{name}.0123abcd"
            folder.mkdir()
            (folder / PROGRAM_FILE).write_bytes(b"program")
            record = ModelDescription(
                name, (StoredFile("m.pte", "program", 7, "ab"),), ({"name": "forward"},)
            )
            db.execute(
                "INSERT INTO models VALUES (?, ?, ?, 0, ?)",
                (name, folder.name, json.dumps(record.to_json()), unloaded),
            )
        db.execute("PRAGMA user_version = 2")
    db.close()


def test_a_schema_2_registry_becomes_version_1_of_each_model(tmp_path, caplog):
    _schema_2_registry(tmp_path, [("a", 0), ("b", 1)])
    with caplog.at_level("INFO", logger="service.store.storage"):
        storage = Storage(tmp_path)
    assert "registry migrated from schema 2 to 3" in caplog.text
    a, b = storage.reconcile()
    assert (a.name, a.version, b.name, b.version) == ("a", 1, "b", 1)
    assert a.program_path.read_bytes() == b"program" and a.description.methods[0]["name"]
    assert storage.unloaded() == {("b", 1)}
    two, _ = storage.commit("a", *_stage(storage, b"two"), replace=False, version=2)
    assert [m.version for m in Storage(tmp_path).reconcile()] == [1, 2, 1]
    with sqlite3.connect(tmp_path / REGISTRY) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3


_KILLED_MID_TRANSACTION = """
import os, signal, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA cache_size = 1")  # pages spill into the file mid-transaction: a hot journal
db.execute("BEGIN IMMEDIATE")
for i in range(200):
    db.execute(
        "INSERT INTO models (name, version, directory, description, created_at) "
        "VALUES (?, 1, 'd', ?, 0)",
        (f"ghost{i}", "x" * 4000),
    )
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_transaction_killed_midway_is_rolled_back_when_the_store_opens(tmp_path):
    """kill -9 inside a registry transaction leaves SQLite's hot journal; opening the store
    (what the server does before serving) rolls it back, deletes it and checks the registry."""
    import subprocess
    import sys

    storage = Storage(tmp_path)
    staged, description = _stage(storage)
    storage.commit("m", staged, description, replace=False)
    before = (tmp_path / REGISTRY).stat().st_size
    child = subprocess.run([sys.executable, "-c", _KILLED_MID_TRANSACTION, tmp_path / REGISTRY])
    assert child.returncode == -9
    journal = tmp_path / (REGISTRY + "-journal")
    assert journal.exists() and journal.stat().st_size > 0
    assert (tmp_path / REGISTRY).stat().st_size > before, "the killed transaction wrote the file"
    reopened = Storage(tmp_path)
    assert not journal.exists()
    assert [m.name for m in reopened.all()] == ["m"]
    assert rows(tmp_path) == [("m", reopened.get("m").directory.name)]


def test_a_registry_that_fails_its_check_stops_the_store(tmp_path):
    Storage(tmp_path)
    registry = tmp_path / REGISTRY
    with sqlite3.connect(registry) as db:
        for i in range(300):
            db.execute(
                "INSERT INTO models (name, version, directory, description, created_at) "
                "VALUES (?, 1, 'd', ?, 0)",
                (f"n{i}", "x" * 100),
            )
    data = bytearray(registry.read_bytes())
    page = 4096
    data[-page + 8 : -page + 200] = bytes(192)  # the last page's cell pointers
    registry.write_bytes(bytes(data))
    with pytest.raises(RegistryCorrupt, match="(?s)quick_check: .*tree page"):
        Storage(tmp_path)
