"""Deploying: an upload is checked, stored as one or more versions of its model, and the versions
the model's version policy selects are served.

ModelService inherits this; it shares the service's state (the catalog of models, per-name
locks, the storage). Whatever changes a model's stored versions (an upload, a delete, a load)
ends in `_settle`, which opens the selected versions that are not open yet and says which open
ones to close, so the served set always follows the policy.
"""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np

from service.dataplane.catalog import UNLOADED, Model, Served, serve
from service.dataplane.instances import plan_for
from service.dataplane.model_pool import ModelPool
from service.dataplane.warmup import WarmupFailed, run_warmups
from service.errors import (
    Aborted,
    Conflict,
    Invalid,
    Problem,
    ServiceError,
    TooLarge,
    Unavailable,
    clip,
    refused,
)
from service.ingest.pipeline import IngestRefused, run_ingest
from service.ingest.staging import StagedUpload
from service.inline_policy import InlinePolicy
from service.shared.arena import ALIGNMENT
from service.store import digests
from service.store.records import ModelDescription, StoredModel
from service.store.storage import NameTaken

# The service's logger: operators filter its upload and access lines by this name.
log = logging.getLogger("service.dataplane.service")


def outcome_of(exc: BaseException, outcomes: tuple) -> str:
    return next((name for kind, name in outcomes if isinstance(exc, kind)), "error")


_UPLOAD_OUTCOMES = (
    (Aborted, "aborted"),
    (Invalid, "refused"),
    (TooLarge, "too_large"),
    (Conflict, "conflict"),
)


class _OpenFailed(Exception):
    """A just-committed version passed the load check but could not be opened."""

    def __init__(self, stored: StoredModel, cause: Exception):
        super().__init__(str(cause))
        self.stored = stored


class Deployment:
    def _open_pool(self, stored: StoredModel) -> ModelPool:
        """Checks a version's files against their recorded digests (DigestMismatch), opens its
        instances and runs its warmups on them (WarmupFailed if one fails): a version serves
        only verified and warmed."""
        try:
            check = digests.verify(stored)
        except digests.DigestMismatch:
            self.metrics.digest_checked(stored.name, "mismatch")
            raise
        self.metrics.digest_checked(stored.name, "ok", check.seconds)
        pool = self.metrics.open_pool(
            stored.name,
            lambda: ModelPool(
                stored,
                self._ethost,
                plan_for(
                    stored.description.effective_config.instance_count,
                    self.settings,
                    (b.id for b in self.backends if b.device == "gpu"),
                ),
                self.settings.kernel_threadpool,
                InlinePolicy(self.settings.inline_execute_us).execute_below_s,
            ),
            stored.version,
        )
        pool.warmup_s = run_warmups(pool, stored.description.effective_config)
        self.metrics.warmed_up(stored.name, stored.version, pool.warmup_s)
        return pool

    async def _settle(
        self, entry: Model, stored: dict[int, StoredModel], strict: frozenset[int] = frozenset()
    ) -> list[Served]:
        """Makes `stored` the model's versions and serves the ones its policy selects, reusing
        the open pools of versions that stay; returns the pools to close (after _changed()).

        A version in `strict` that cannot be opened (other than by its warmup) raises
        _OpenFailed with nothing changed; any other one is kept unavailable with why."""
        kept = {v: s for v, s in entry.served.items() if v in stored and stored[v] is s.stored}
        probe = Model(entry.name, stored, kept, {}, entry.unloaded & set(stored))
        served: dict[int, Served] = {}
        reasons: dict[int, str] = {}
        opened: list[Served] = []
        try:
            for version in probe.selected():
                if version in probe.unloaded:
                    reasons[version] = UNLOADED
                    continue
                if version in kept:
                    served[version] = kept[version]
                    continue
                version_stored = stored[version]
                reason = version_stored.description.not_runnable
                if reason is None and version not in strict:
                    reason = self.gpu_faults.quarantined(entry.name)
                if reason is None:
                    try:
                        pool = await asyncio.get_running_loop().run_in_executor(
                            self._loader, self._open_pool, version_stored
                        )
                    except WarmupFailed as failed:  # stored, and unavailable with why
                        reason = str(failed)
                        self._load_fault(version_stored, failed)
                    except digests.DigestMismatch as changed:  # likewise, whatever the load
                        log.error(
                            "model %s version %d is unavailable: %s", entry.name, version, changed
                        )
                        reason = str(changed)
                    except Exception as exc:
                        self._load_fault(version_stored, exc)
                        if version in strict:
                            raise _OpenFailed(version_stored, exc) from exc
                        log.error(
                            "model %s version %d could not be opened: %s",
                            entry.name,
                            version,
                            exc,
                        )
                        reason = f"{type(exc).__name__}: {exc}"
                    else:
                        served[version] = serve(version_stored, pool)
                        opened.append(served[version])
                        continue
                reasons[version] = reason
        except BaseException:
            for fresh in opened:
                await self._close(fresh)
            raise
        closing = [s for v, s in entry.served.items() if served.get(v) is not s]
        entry.stored, entry.served, entry.reasons = stored, served, reasons
        entry.unloaded &= set(stored)
        return closing

    def _load_fault(self, stored: StoredModel, failure: Exception) -> None:
        """A load (or its warmup) failed: a GPU fault if the device context no longer works
        after it (the engine then restarts; gpu_faults.py), else the model's own failure."""
        self.gpu_faults.classify(stored.name, str(stored.version), "(load)", "[]", failure)

    async def _close(self, served: Served) -> None:
        await served.pool.close()
        self.metrics.forget_pool(served.stored.name, served.stored.version)

    def body_buffer(self, nbytes: int, align_at: int) -> tuple[memoryview, None]:
        """Memory a protocol receives a request body into, its byte `align_at` on a 256-byte
        boundary (a front's engine client gives a slot of shared memory instead)."""
        buffer = bytearray(nbytes + ALIGNMENT)
        start = -(np.frombuffer(buffer, np.uint8).ctypes.data + align_at) % ALIGNMENT
        return memoryview(buffer)[start : start + nbytes], None

    def upload_refused(self, name: str | None, error: ServiceError, elapsed_s: float) -> None:
        """Counts and logs an upload that was refused before it was staged whole."""
        self._upload_finished(
            name, outcome_of(error, _UPLOAD_OUTCOMES), [p.rule for p in error.problems], elapsed_s
        )

    def _upload_finished(self, name, outcome: str, rules: list[str], elapsed_s: float) -> None:
        self.metrics.upload_finished(outcome, rules)
        log.info(
            "upload model=%r outcome=%s problems=%d duration_s=%.6f",
            None if name is None else clip(name),
            outcome,
            len(rules),
            elapsed_s,
        )

    async def deploy(self, upload: StagedUpload, received_s: float = 0.0) -> dict:
        """Checks, stores and starts serving a staged upload (whose directory it consumes), then
        counts and logs the outcome; `received_s` is how long receiving it took."""
        begun = time.perf_counter() - received_s
        outcome, rules = "error", []
        try:
            description = await self._deploy(upload)
            outcome = "accepted"
            return description
        except ServiceError as exc:
            outcome = outcome_of(exc, _UPLOAD_OUTCOMES)
            rules = [problem.rule for problem in exc.problems]
            raise
        finally:
            self._upload_finished(upload.model_name, outcome, rules, time.perf_counter() - begun)

    def _conflict(self, name: str, version: int | None) -> Conflict:
        entry = self._catalog.get(name)
        following = 1 + max(entry.stored) if entry is not None and entry.stored else 1
        if version is None:
            return Conflict(
                f"model {name!r} exists; send replace=true to replace its version "
                f"{following - 1}, or version={following} to add a version"
            )
        return Conflict(f"model {name!r} has a version {version}; send replace=true to replace it")

    async def _deploy(self, upload: StagedUpload) -> dict:
        """The staging directory is always consumed."""
        try:
            name = upload.model_name
            if not upload.replace and not upload.versions:
                entry = self._catalog.get(name)
                if (upload.version is None and self._exists(name)) or (
                    entry is not None and upload.version in entry.stored
                ):
                    raise self._conflict(name, upload.version)
            descriptions = {}
            problems: list[Problem] = []
            for part in upload.parts:
                try:
                    descriptions[part.version] = await asyncio.get_running_loop().run_in_executor(
                        self._ingest, run_ingest, part, self.settings, self._ingest_backends
                    )
                except IngestRefused as refusal:
                    problems += _in_version(refusal.problems, part, upload)
            if problems:
                raise refused("upload refused", problems)
            async with self._lock(name):
                return await self._commit(upload, descriptions)
        finally:
            self.storage.discard(upload.directory)

    async def _commit(
        self, upload: StagedUpload, descriptions: dict[int | None, ModelDescription]
    ) -> dict:
        name = upload.model_name
        entry = self._catalog.get(name) or Model(name)
        parts = {}
        for part in upload.parts:
            version = part.version
            if version is None:  # a new model's first version, or its newest one replaced
                version = max(entry.stored) if upload.replace and entry.stored else 1
            parts[version] = (part.directory, descriptions[part.version])
        exclusive = bool(upload.versions)
        try:
            new, displaced = await asyncio.to_thread(
                self.storage.commit_versions, name, parts, upload.replace, exclusive
            )
        except NameTaken as taken:
            raise self._conflict(name, taken.args[1]) from None
        stored = {} if exclusive else dict(entry.stored)
        stored.update({model.version: model for model in new})
        entry.unloaded -= {model.version for model in new}
        self.gpu_faults.lift(name)  # a redeploy is a fresh start
        try:
            closing = await self._settle(entry, stored, frozenset(m.version for m in new))
        except _OpenFailed as failed:
            log.exception(
                "model %s version %d passed the load check but could not be opened",
                name,
                failed.stored.version,
            )
            await asyncio.to_thread(self.storage.rollback, new, displaced)
            raise Unavailable(
                f"model {name!r} version {failed.stored.version} could not be opened: {failed}"
            ) from None
        self._catalog[name] = entry
        self._refused.pop(name, None)
        self._changed()
        for served in closing:
            await self._close(served)
        for model in displaced:
            await asyncio.to_thread(self.storage.remove_directory, model)
        # An upload of one version is answered with that version's description.
        return self._description(name, None, None if exclusive else new[0].version)


def _in_version(problems: list[Problem], part: StagedUpload, upload: StagedUpload) -> list:
    """A refused version's problems; in an upload of several versions each names its version."""
    if len(upload.parts) == 1:
        return problems
    return [
        Problem(
            f"{part.version}/{p.file}" if p.file else p.file,
            p.rule,
            f"version {part.version}: {p.message}",
            p.input,
        )
        for p in problems
    ]
