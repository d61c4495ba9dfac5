"""The model repository side of the dataplane: load, unload, the index, and model directories.

ModelService inherits these; they share its state (the catalog of models and their versions,
per-name locks) and use its deploy(), so every way a model arrives -- a multipart upload, the v2
repository `load`, a model directory at start -- goes through the same staging and ingest.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

from service import rules
from service.errors import ServiceError, Unavailable, clip, invalid
from service.ingest.model_dirs import stage_folder, unchanged
from service.ingest.receive import receive_and_deploy
from service.ingest.staging import stage_files, stage_stored

log = logging.getLogger(__name__)


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
        makes the model exactly those versions, through the same ingest as every other; without,
        the stored model is served again (re-ingested from its stored files if a config is
        given), as many of its versions as its policy selects."""
        if files is not None:
            return await receive_and_deploy(
                self,
                lambda: asyncio.to_thread(stage_files, self.begin_staging(), name, files, config),
            )
        if config is not None:
            stored = sorted(self._entry(name).stored.values(), key=lambda m: m.version)
            return await receive_and_deploy(
                self,
                lambda: asyncio.to_thread(stage_stored, self.begin_staging(), stored, config),
            )
        self._entry(name)  # before the lock: locks exist only for names that exist
        async with self._lock(name):
            entry = self._entry(name)
            if self.gpu_faults.quarantined(name) is not None:
                self.gpu_faults.lift(name)  # the operator asks for it: it loads again
            if entry.unloaded or not entry.served:
                was = set(entry.unloaded)
                entry.unloaded.clear()
                closing = await self._settle(entry, dict(entry.stored))
                self._changed()
                for served in closing:
                    await self._close(served)
                if was:
                    await asyncio.to_thread(self.storage.set_unloaded, name, False)
                if not entry.served:
                    raise Unavailable(
                        f"model {name!r} cannot be loaded: {entry.unavailable_reason()}"
                    )
            return self._description(name)

    async def unload_model(self, name: str) -> None:
        """Stops serving a model (every version) but keeps it stored, also across restarts;
        load_model(name) serves it again."""
        self._entry(name)
        async with self._lock(name):
            entry = self._entry(name)
            if entry.unloaded == set(entry.stored) and not entry.served:
                return
            entry.unloaded = set(entry.stored)
            closing = await self._settle(entry, dict(entry.stored))
            self._changed()
            await asyncio.to_thread(self.storage.set_unloaded, name, True)
            for served in closing:
                await self._close(served)

    async def repository_index(self) -> list[dict]:
        """Every stored version of every model, with its state and why it does not serve."""
        index = []
        for name in self._names():
            if name in self._refused:
                reason = self._refused[name].message
                entry = self._catalog.get(name)
                versions = sorted(entry.stored) if entry is not None else [1]
                reasons = {v: reason for v in versions}
            else:
                entry = self._catalog[name]
                reasons = {v: entry.reason(v) or "" for v in sorted(entry.stored)}
            for version, reason in reasons.items():
                index.append(
                    {
                        "name": name,
                        "version": str(version),
                        "state": "UNAVAILABLE" if reason else "READY",
                        "reason": reason,
                    }
                )
        return index

    async def _load_model_dirs(self, entries: list[tuple[str, Path]]) -> None:
        """Ingests each model directory entry that differs from what is stored; a refused one is
        listed unavailable and the rest still serve. The server is ready once all are done."""
        for name, folder in entries:
            entry = self._catalog.get(name)
            stored = entry.newest if entry is not None and entry.stored else None
            try:
                if stored is not None and await asyncio.to_thread(unchanged, stored, folder):
                    continue
                await receive_and_deploy(
                    self,
                    lambda name=name, folder=folder: asyncio.to_thread(
                        stage_folder, self.begin_staging(), name, folder
                    ),
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
            entry = self._catalog.get(name)
            closing = []
            if entry is not None:
                closing = list(entry.served.values())
                entry.reasons = {v: error.message for v in entry.stored}
                entry.served = {}
            self._changed()
            for served in closing:
                await self._close(served)
