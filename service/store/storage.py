"""Durable model storage: one directory per model generation plus a SQLite registry.

The registry row is the single source of truth for what is deployed. Files are written into a
staging directory, fsynced, and renamed into place *before* the row points at them, so a model is
never visible half-written; anything on disk that no row points at is a leftover of an interrupted
upload, replace or delete, and startup reconciliation removes it.

The registry's form is versioned (PRAGMA user_version, SCHEMA_VERSION): a registry written by
an earlier release is migrated in place when the store opens, in one transaction, and one written
by a later release is refused rather than misread.

Layout under the artifacts root:
    registry.sqlite3            the registry (the only file outside the two directories below)
    models/<name>.<generation>/ program.pte and the model's .ptd files under their uploaded names
    staging/<uuid>/             uploads being received and checked
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
# 2: rows say whether the model was unloaded (the repository API), which a restart keeps.
SCHEMA_VERSION = 2
_CREATE = (
    "CREATE TABLE models (name TEXT PRIMARY KEY, directory TEXT NOT NULL, "
    "description TEXT NOT NULL, created_at REAL NOT NULL, "
    "unloaded INTEGER NOT NULL DEFAULT 0)"
)
_REPLACE = (
    "INSERT OR REPLACE INTO models (name, directory, description, created_at) VALUES (?, ?, ?, ?)"
)
log = logging.getLogger(__name__)


class NameTaken(Exception):
    pass


class RegistryTooNew(Exception):
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

    def get(self, name: str) -> StoredModel | None:
        with self._connect() as db:
            row = db.execute(
                "SELECT name, directory, description FROM models WHERE name = ?", (name,)
            ).fetchone()
        return None if row is None else self._model(row)

    def all(self) -> list[StoredModel]:
        with self._connect() as db:
            rows = db.execute("SELECT name, directory, description FROM models ORDER BY name")
            return [self._model(row) for row in rows.fetchall()]

    def _model(self, row) -> StoredModel:
        return StoredModel(
            row[0], self.models_dir / row[1], ModelDescription.from_json(json.loads(row[2]))
        )

    def commit(
        self, name: str, staged: Path, description: ModelDescription, replace: bool
    ) -> tuple[StoredModel, StoredModel | None]:
        """Moves a checked upload into place and registers it; returns (new, replaced).

        The replaced model's directory stays until the caller calls remove_directory, so requests
        still running on the old generation keep their files.
        """
        for child in staged.iterdir():
            _fsync_file(child)
        fsync_directory(staged)
        directory_name = f"{name}.{uuid.uuid4().hex}"
        target = self.models_dir / directory_name
        os.rename(staged, target)
        fsync_directory(self.models_dir)
        fsync_directory(self.staging_dir)
        new = StoredModel(name, target, description)
        try:
            with self._lock, self._connect() as db:
                row = db.execute(
                    "SELECT name, directory, description FROM models WHERE name = ?", (name,)
                ).fetchone()
                if row is not None and not replace:
                    raise NameTaken(name)
                db.execute(
                    _REPLACE, (name, directory_name, json.dumps(description.to_json()), time.time())
                )
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        return new, None if row is None else self._model(row)

    def set_unloaded(self, name: str, unloaded: bool) -> None:
        """Remembers that a model is not to be served until loaded again (a new upload of the
        name is served: committing resets it)."""
        with self._lock, self._connect() as db:
            db.execute("UPDATE models SET unloaded = ? WHERE name = ?", (int(unloaded), name))

    def unloaded(self) -> set[str]:
        with self._connect() as db:
            return {row[0] for row in db.execute("SELECT name FROM models WHERE unloaded != 0")}

    def unregister(self, name: str) -> StoredModel | None:
        with self._lock, self._connect() as db:
            row = db.execute(
                "SELECT name, directory, description FROM models WHERE name = ?", (name,)
            ).fetchone()
            if row is not None:
                db.execute("DELETE FROM models WHERE name = ?", (name,))
        return None if row is None else self._model(row)

    def reinstate(self, model: StoredModel, failed: StoredModel) -> None:
        """Undoes a commit whose model could not be served: the replaced one is registered again."""
        with self._lock, self._connect() as db:
            db.execute(
                _REPLACE,
                (
                    model.name,
                    model.directory.name,
                    json.dumps(model.description.to_json()),
                    time.time(),
                ),
            )
        self.remove_directory(failed)

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
                    "model %s lost files (%s); removing it from the registry",
                    model.name,
                    ", ".join(missing),
                )
                self.unregister(model.name)
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
    """Creates the registry, or brings one written by an earlier release to SCHEMA_VERSION."""
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
    log.info("registry migrated from schema %d to %d", version, SCHEMA_VERSION)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
