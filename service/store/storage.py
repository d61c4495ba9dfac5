"""Durable model storage: one directory per stored model version plus a SQLite registry.

The registry row (one per model version) is the single source of truth for what is deployed.
Files are written into a staging directory, fsynced, and renamed into place *before* the row
points at them, so a version is never visible half-written; the rows of one upload (a repository
load may carry several versions) are written in one transaction, so a crash leaves all or none
of them. Anything on disk that no row points at is a leftover of an interrupted upload, replace
or delete, and startup reconciliation removes it.

Crash safety of the registry itself is SQLite's rollback journal (`registry.sqlite3-journal`,
synchronous=FULL): a transaction's journal exists while it runs, and a process killed inside one
leaves it behind as a "hot" journal, which the next connection to write rolls back and deletes
before it reads. The store opens the registry, takes its write lock (which does that recovery),
runs SQLite's quick_check and migrates before the server serves anything, so a journal seen
right after a kill -9 is the last upload's interrupted transaction, undone at that open; one
seen later belongs to a transaction in progress. A registry that fails the check stops the
start (RegistryCorrupt) rather than serving from it.

The registry's form is versioned (PRAGMA user_version, SCHEMA_VERSION): a registry written by
an earlier release is migrated in place when the store opens, in one transaction, and one written
by a later release is refused rather than misread.

Layout under the artifacts root:
    registry.sqlite3              the registry (the only file outside the two directories below)
    models/<name>.<v>.<uuid>/     program.pte and the version's .ptd files under their uploaded
                                  names (directories of schema < 3 are <name>.<uuid>)
    staging/<uuid>/               uploads being received and checked
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import threading
import time
import uuid
from pathlib import Path

from service.store.records import PROGRAM_FILE, ModelDescription, StoredModel  # noqa: F401

REGISTRY = "registry.sqlite3"
# 0: rows hold the native API's description dict (before versioning); 1: rows hold records;
# 2: rows say whether the model was unloaded (the repository API), which a restart keeps;
# 3: one row per model version (the primary key is name and version).
SCHEMA_VERSION = 3
_TABLE = (
    "(name TEXT NOT NULL, version INTEGER NOT NULL, directory TEXT NOT NULL, "
    "description TEXT NOT NULL, created_at REAL NOT NULL, "
    "unloaded INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (name, version))"
)
_CREATE = "CREATE TABLE models " + _TABLE
_REPLACE = (
    "INSERT OR REPLACE INTO models (name, version, directory, description, created_at) "
    "VALUES (?, ?, ?, ?, ?)"
)
_COLUMNS = "SELECT name, directory, description, version FROM models"
log = logging.getLogger(__name__)


class NameTaken(Exception):
    pass


class RegistryTooNew(Exception):
    pass


class RegistryCorrupt(Exception):
    pass


def fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StagingArea:
    """The staging directories of uploads being received, which the protocol fronts write into
    without opening the registry (the engine process owns that)."""

    def __init__(self, root: Path):
        self.staging_dir = Path(root).resolve() / "staging"

    def new_staging_dir(self) -> Path:
        path = self.staging_dir / uuid.uuid4().hex
        path.mkdir(parents=True)
        return path

    def discard(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)


class Storage(StagingArea):
    def __init__(self, root: Path):
        super().__init__(root)
        self.root = Path(root).resolve()
        self.models_dir = self.root / "models"
        self._lock = threading.Lock()
        for directory in (self.root, self.models_dir, self.staging_dir):
            directory.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            _migrate(db)

    def _connect(self) -> _Transaction:
        db = sqlite3.connect(self.root / REGISTRY, timeout=30, isolation_level=None)
        db.execute("PRAGMA synchronous=FULL")
        return _Transaction(db)

    def get(self, name: str, version: int | None = None) -> StoredModel | None:
        """That version of the model, or (`version` None) its highest stored one."""
        with self._connect() as db:
            return self._get(db, name, version)

    def _get(self, db, name: str, version: int | None) -> StoredModel | None:
        if version is None:
            row = db.execute(
                _COLUMNS + " WHERE name = ? ORDER BY version DESC LIMIT 1", (name,)
            ).fetchone()
        else:
            row = db.execute(
                _COLUMNS + " WHERE name = ? AND version = ?", (name, version)
            ).fetchone()
        return None if row is None else self._model(row)

    def all(self) -> list[StoredModel]:
        with self._connect() as db:
            rows = db.execute(_COLUMNS + " ORDER BY name, version")
            return [self._model(row) for row in rows.fetchall()]

    def _model(self, row) -> StoredModel:
        return StoredModel(
            row[0],
            self.models_dir / row[1],
            ModelDescription.from_json(json.loads(row[2])),
            row[3],
        )

    def commit(
        self,
        name: str,
        staged: Path,
        description: ModelDescription,
        replace: bool,
        version: int = 1,
    ) -> tuple[StoredModel, StoredModel | None]:
        """Moves one checked version into place and registers it; returns (new, replaced)."""
        new, displaced = self.commit_versions(name, {version: (staged, description)}, replace)
        return new[0], displaced[0] if displaced else None

    def commit_versions(
        self,
        name: str,
        staged: dict[int, tuple[Path, ModelDescription]],
        replace: bool,
        exclusive: bool = False,
    ) -> tuple[list[StoredModel], list[StoredModel]]:
        """Moves checked versions into place and registers them in one transaction; returns
        (new, displaced): the versions they replaced and, when `exclusive` (the model is to
        hold exactly these versions), every other stored version, unregistered with them.
        NameTaken if a version exists and not `replace`.

        Displaced directories stay until the caller calls remove_directory, so requests still
        running on them keep their files.
        """
        targets = {}
        try:
            for version, (directory, _) in sorted(staged.items()):
                for child in directory.iterdir():
                    _fsync_file(child)
                fsync_directory(directory)
                directory_name = f"{name}.{version}.{uuid.uuid4().hex}"
                os.rename(directory, self.models_dir / directory_name)
                targets[version] = directory_name
            fsync_directory(self.models_dir)
            fsync_directory(self.staging_dir)
            with self._lock, self._connect() as db:
                rows = db.execute(_COLUMNS + " WHERE name = ?", (name,)).fetchall()
                current = {row[3]: self._model(row) for row in rows}
                taken = sorted(set(current) & set(staged))
                if taken and not replace:
                    raise NameTaken(name, taken[0])
                displaced = [model for v, model in current.items() if exclusive or v in staged]
                if exclusive:
                    db.execute("DELETE FROM models WHERE name = ?", (name,))
                now = time.time()
                for version, directory_name in targets.items():
                    description = staged[version][1]
                    db.execute(
                        _REPLACE,
                        (name, version, directory_name, json.dumps(description.to_json()), now),
                    )
        except BaseException:
            for directory_name in targets.values():
                shutil.rmtree(self.models_dir / directory_name, ignore_errors=True)
            raise
        new = [
            StoredModel(name, self.models_dir / directory_name, staged[version][1], version)
            for version, directory_name in targets.items()
        ]
        return new, sorted(displaced, key=lambda m: m.version)

    def set_unloaded(self, name: str, unloaded: bool, version: int | None = None) -> None:
        """Remembers that a model (or one version) is not to be served until loaded again; a
        new upload of a version is served: committing resets it."""
        with self._lock, self._connect() as db:
            if version is None:
                db.execute("UPDATE models SET unloaded = ? WHERE name = ?", (int(unloaded), name))
            else:
                db.execute(
                    "UPDATE models SET unloaded = ? WHERE name = ? AND version = ?",
                    (int(unloaded), name, version),
                )

    def unloaded(self) -> set[tuple[str, int]]:
        """(name, version) of every stored version that was unloaded."""
        with self._connect() as db:
            rows = db.execute("SELECT name, version FROM models WHERE unloaded != 0")
            return {(row[0], row[1]) for row in rows}

    def unregister(self, name: str, version: int | None = None) -> list[StoredModel]:
        """Removes the model's rows (every version, or one); returns what they pointed at."""
        with self._lock, self._connect() as db:
            if version is None:
                rows = db.execute(_COLUMNS + " WHERE name = ?", (name,)).fetchall()
                db.execute("DELETE FROM models WHERE name = ?", (name,))
            else:
                rows = db.execute(
                    _COLUMNS + " WHERE name = ? AND version = ?", (name, version)
                ).fetchall()
                db.execute("DELETE FROM models WHERE name = ? AND version = ?", (name, version))
        return [self._model(row) for row in rows]

    def rollback(self, new: list[StoredModel], displaced: list[StoredModel]) -> None:
        """Undoes a commit whose versions could not be served, in one transaction: its rows go,
        the displaced ones are registered again; then the new directories are removed."""
        with self._lock, self._connect() as db:
            for model in new:
                db.execute(
                    "DELETE FROM models WHERE name = ? AND version = ? AND directory = ?",
                    (model.name, model.version, model.directory.name),
                )
            for model in displaced:
                db.execute(
                    _REPLACE,
                    (
                        model.name,
                        model.version,
                        model.directory.name,
                        json.dumps(model.description.to_json()),
                        time.time(),
                    ),
                )
        for model in new:
            self.remove_directory(model)

    def remove_directory(self, model: StoredModel) -> None:
        shutil.rmtree(model.directory, ignore_errors=True)
        fsync_directory(self.models_dir)

    def reconcile(self, clear_staging: bool = True) -> list[StoredModel]:
        """Brings disk and registry back in agreement after a crash; returns the models to serve.

        `clear_staging` False keeps the staging area: an engine restarted under running fronts
        must not delete the uploads they are receiving (the next full start clears it)."""
        for leftover in self.staging_dir.iterdir() if clear_staging else ():
            log.info("removing unfinished upload %s", leftover.name)
            self.discard(leftover)
        kept = []
        for model in self.all():
            missing = _missing_files(model)
            if missing:
                log.warning(
                    "model %s version %d lost files (%s); removing it from the registry",
                    model.name,
                    model.version,
                    ", ".join(missing),
                )
                self.unregister(model.name, model.version)
            else:
                kept.append(model)
        referenced = {m.directory.name for m in kept}
        for entry in self.models_dir.iterdir():
            if entry.name not in referenced:
                log.info("removing unregistered model files %s", entry.name)
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
        fsync_directory(self.models_dir)
        return kept


class _Transaction:
    """A connection used as `with`: one IMMEDIATE transaction, committed or rolled back, closed."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, kind, value, traceback) -> None:
        try:
            self.db.execute("COMMIT" if kind is None else "ROLLBACK")
        finally:
            self.db.close()


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _missing_files(model: StoredModel) -> list[str]:
    missing = []
    for stored in model.description.files:
        try:
            if model.path_of(stored).stat().st_size != stored.size:
                missing.append(f"{stored.name} (size changed)")
        except FileNotFoundError:
            missing.append(stored.name)
    return missing


def _migrate(db: sqlite3.Connection) -> None:
    """Creates the registry, or brings one written by an earlier release to SCHEMA_VERSION;
    checked first (under the write lock: any hot journal has been rolled back by then)."""
    problems = [row[0] for row in db.execute("PRAGMA quick_check").fetchall()]
    if problems != ["ok"]:
        shown = "; ".join(problems[:3])
        raise RegistryCorrupt(f"the registry fails SQLite's quick_check: {shown}")
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise RegistryTooNew(
            f"the registry was written by a newer release (schema {version}; "
            f"this one reads up to {SCHEMA_VERSION})"
        )
    if not db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'models'"
    ).fetchone():
        db.execute(_CREATE)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        return
    if version == SCHEMA_VERSION:  # nothing to migrate, nothing to say
        return
    if version < 1:
        rows = db.execute("SELECT name, description FROM models").fetchall()
        for name, text in rows:
            record = ModelDescription.from_legacy(json.loads(text))
            db.execute(
                "UPDATE models SET description = ? WHERE name = ?",
                (json.dumps(record.to_json()), name),
            )
    if version < 2:
        db.execute("ALTER TABLE models ADD COLUMN unloaded INTEGER NOT NULL DEFAULT 0")
    if version < 3:  # each stored model becomes its version 1 (SQLite cannot alter a key)
        db.execute("CREATE TABLE models_v3 " + _TABLE)
        db.execute(
            "INSERT INTO models_v3 (name, version, directory, description, created_at, "
            "unloaded) SELECT name, 1, directory, description, created_at, unloaded FROM models"
        )
        db.execute("DROP TABLE models")
        db.execute("ALTER TABLE models_v3 RENAME TO models")
    log.info("registry migrated from schema %d to %d", version, SCHEMA_VERSION)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
