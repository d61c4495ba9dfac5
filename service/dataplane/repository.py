"""The model repository side of the dataplane: load, unload, the index, and model directories.

ModelService inherits these; they share its state (served models, unavailable ones, per-name
locks) and use its deploy(), so every way a model arrives -- a multipart upload, the v2
repository `load`, a model directory at start -- goes through the same staging and ingest.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from service import rules
from service.dataplane.model_pool import ModelPool
from service.dataplane.signature import signature_of
from service.dataplane.types import MethodSignature
from service.errors import ServiceError, Unavailable, clip, invalid
from service.ingest.model_dirs import stage_folder, unchanged
from service.ingest.staging import stage_files, stage_stored
from service.store.records import StoredModel

log = logging.getLogger(__name__)
# Every model has one version: a replace swaps it atomically rather than adding a second one.
MODEL_VERSION = "1"
# Why a model that is stored and could serve does not: the repository API unloaded it.
UNLOADED = "unloaded"


@dataclass
class Served:
    stored: StoredModel
    pool: ModelPool
    signatures: dict[str, MethodSignature]
    schedulers: dict = field(default_factory=dict)  # method -> its Scheduler, made on first use

    @property
    def max_batch(self) -> int:
        return (self.stored.description.config or {}).get("max_batch_size", 0)


def load_config(value) -> dict:
    """The `config` parameter of a repository load: JSON text holding the model configuration,
    as the REST and gRPC protocols both carry it. Its content is checked by the ingest."""
    if not isinstance(value, str):
        raise invalid(rules.REPOSITORY_CONFIG, "'config' must be a string of JSON")
    try:
        config = json.loads(value)
    except (ValueError, RecursionError) as exc:
        raise invalid(rules.REPOSITORY_CONFIG, f"'config' is not valid JSON: {clip(exc)}") from None
    if not isinstance(config, dict):
        raise invalid(rules.REPOSITORY_CONFIG, "'config' must be a JSON object")
    return config


def serve(stored: StoredModel, pool: ModelPool) -> Served:
    return Served(stored, pool, {m: signature_of(pool.meta(m)) for m in pool.method_names})


def not_runnable(stored: StoredModel) -> str | None:
    """Why ingest stored this model as unable to run on this host; None when it can run.

    Such a model is kept and listed but never opened: opening it would initialize delegates that
    cannot work here (e.g. TensorRT plans on a host without TensorRT), so /infer answers with
    this reason instead.
    """
    return stored.description.not_runnable


def refused_view(name: str, error: ServiceError) -> dict:
    """A model directory entry that ingest refused: listed, with its problems, never served."""
    return {
        "name": name,
        "state": "unavailable",
        "runnable": False,
        "files": [],
        "methods": [],
        "warnings": [],
        "error": error.message,
        "problems": [p.as_dict() for p in error.problems],
    }


class Repository:
    async def load_model(
        self, name: str, files: dict[str, bytes] | None = None, config: dict | None = None
    ) -> dict:
        """The repository `load`: with files ({"<version>/<filename>": bytes}) an upload that
        replaces any model of that name, through the same ingest as every other; without, the
        stored model is served again (re-ingested from its stored files if a config is given)."""
        if files is not None:
            return await self.deploy(
                lambda: asyncio.to_thread(stage_files, self.begin_staging(), name, files, config)
            )
        if config is not None:
            stored = self._stored(name)
            return await self.deploy(
                lambda: asyncio.to_thread(stage_stored, self.begin_staging(), stored, config)
            )
        self._stored(name)  # before the lock: locks exist only for names that exist
        async with self._lock(name):
            stored = self._stored(name)
            if name not in self._models:
                reason = not_runnable(stored)
                if reason is not None:
                    raise Unavailable(f"model {name!r} cannot be loaded: {reason}")
                try:
                    pool = await asyncio.to_thread(self._open_pool, stored)
                except Exception as exc:
                    self._unavailable[name] = (stored, f"{type(exc).__name__}: {exc}")
                    raise Unavailable(f"model {name!r} could not be opened: {exc}") from None
                self._models[name] = serve(stored, pool)
                self._unavailable.pop(name, None)
                self._changed()
                await asyncio.to_thread(self.storage.set_unloaded, name, False)
            return self._description(name)

    async def unload_model(self, name: str) -> None:
        """Stops serving a model but keeps it stored, also across restarts; load_model(name)
        serves it again."""
        self._stored(name)
        async with self._lock(name):
            served = self._models.pop(name, None)
            if served is not None:
                self._unavailable[name] = (served.stored, UNLOADED)
                self._changed()
                await asyncio.to_thread(self.storage.set_unloaded, name, True)
                await served.pool.close()

    async def repository_index(self) -> list[dict]:
        index = []
        for name in self._names():
            if name in self._refused:
                reason = self._refused[name].message
            else:
                reason = self._unavailable[name][1] if name in self._unavailable else ""
            index.append(
                {
                    "name": name,
                    "version": MODEL_VERSION,
                    "state": "UNAVAILABLE" if reason else "READY",
                    "reason": reason,
                }
            )
        return index

    async def _load_model_dirs(self, entries: list[tuple[str, Path]]) -> None:
        """Ingests each model directory entry that differs from what is stored; a refused one is
        listed unavailable and the rest still serve. The server is ready once all are done."""
        for name, folder in entries:
            current = self._models.get(name)
            stored = current.stored if current else self._unavailable.get(name, (None,))[0]
            try:
                if stored is not None and await asyncio.to_thread(unchanged, stored, folder):
                    continue
                await self.deploy(
                    lambda name=name, folder=folder: asyncio.to_thread(
                        stage_folder, self.begin_staging(), name, folder
                    )
                )
                log.info("model %s loaded from %s", name, folder)
            except ServiceError as exc:
                log.error(
                    "model %s in %s was refused: %s %s",
                    name,
                    folder,
                    exc.message,
                    "; ".join(p.message for p in exc.problems),
                )
                await self._refuse(name, exc)
        self.ready = True

    async def _refuse(self, name: str, error: ServiceError) -> None:
        """A stored model of the same name no longer matches its directory: it stops serving."""
        async with self._lock(name):
            self._refused[name] = error
            served = self._models.pop(name, None)
            if served is not None:
                self._unavailable[name] = (served.stored, error.message)
            self._changed()
            if served is not None:
                await served.pool.close()
