"""The protocol-neutral dataplane: deploy, list, describe, delete and infer.

Transports (HTTP today) translate requests into these calls and ServiceError subclasses into
their own status codes; nothing here knows about HTTP. In-memory `_models` decides what is
visible: a model enters it only once it is stored durably and its instances are ready.
"""
from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Awaitable, Callable

import numpy as np

from service import tensor_codec
from service.config import Settings
from service.ingest import IngestRefused, StagedUpload, load_delegate_checks, run_ingest
from service.ingest_rules import Problem
from service.metrics import UNKNOWN, Metrics
from service.model_pool import ModelPool, PoolClosed
from service.native import import_host
from service.storage import NameTaken, Storage, StoredModel

log = logging.getLogger(__name__)


class ServiceError(Exception):
    def __init__(self, message: str, problems: list[Problem] | None = None):
        super().__init__(message)
        self.message = message
        self.problems = problems or []


class NotFound(ServiceError):
    pass


class Conflict(ServiceError):
    pass


class Invalid(ServiceError):
    pass


class TooLarge(ServiceError):
    pass


class Unavailable(ServiceError):
    pass


class ExecutionFailed(ServiceError):
    pass


@dataclass
class _Served:
    stored: StoredModel
    pool: ModelPool


def _not_runnable(stored: StoredModel) -> str | None:
    """Why ingest stored this model as unable to run on this host; None when it can run.

    Such a model is kept and listed but never opened: opening it would initialize delegates that
    cannot work here (e.g. TensorRT plans on a host without TensorRT), so /infer answers with
    this reason instead.
    """
    if stored.description.get("runnable") is False:
        return stored.description["unavailable_reason"]
    return None


def _outcome(exc: BaseException, outcomes: tuple) -> str:
    return next((name for kind, name in outcomes if isinstance(exc, kind)), "error")


def _input_problem(label: str | None, rule: str, message: str) -> Invalid:
    return Invalid(message, [Problem(None, rule, message, input=label)])


class ModelService:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.storage: Storage | None = None
        self._ethost = None
        self._models: dict[str, _Served] = {}
        # Stored but not served, with why; kept in memory so describing them reads no database.
        self._unavailable: dict[str, tuple[StoredModel, str]] = {}
        # One lock per model name, never dropped: a lock popped while a deploy waits on it would
        # let the next deploy of that name take a fresh one and commit concurrently.
        self._locks: dict[str, asyncio.Lock] = {}
        self._executor = ThreadPoolExecutor(settings.infer_threads, thread_name_prefix="infer")
        # Ingest (child load checks of up to load_check_timeout each) gets threads of its own, so
        # slow uploads queue here instead of starving the shared pool that parses request bodies
        # and commits, and at most this many uploads are checked at once.
        self._ingest = ThreadPoolExecutor(settings.max_concurrent_ingests,
                                          thread_name_prefix="ingest")
        self.metrics = Metrics()
        self.ready = False

    async def start(self) -> None:
        self.storage = Storage(self.settings.artifacts)
        load_delegate_checks(self.settings.delegate_check_modules)
        self._ethost = import_host(self.settings.backend_setup)
        for stored in await asyncio.to_thread(self.storage.reconcile):
            reason = _not_runnable(stored)
            if reason is not None:
                self._unavailable[stored.name] = (stored, reason)
                continue
            try:
                pool = await asyncio.to_thread(self._open_pool, stored)
            except Exception as exc:  # one broken model must not keep the others from serving
                log.error("model %s could not be loaded: %s", stored.name, exc)
                self._unavailable[stored.name] = (stored, f"{type(exc).__name__}: {exc}")
                continue
            self._models[stored.name] = _Served(stored, pool)
        self.ready = True

    async def stop(self) -> None:
        self.ready = False
        for served in list(self._models.values()):
            await served.pool.close()
        self._executor.shutdown(wait=True)
        self._ingest.shutdown(wait=True)

    def _open_pool(self, stored: StoredModel) -> ModelPool:
        return self.metrics.open_pool(stored.name, lambda: ModelPool(
            stored, self._ethost, self.settings.instances_per_model,
            self.settings.kernel_threadpool))

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    def _exists(self, name: str) -> bool:
        return name in self._models or name in self._unavailable

    async def deploy(self, receive: Callable[[], Awaitable[StagedUpload]]) -> dict:
        """Receives, checks, stores and starts serving an upload, then counts and logs the outcome.

        Receiving belongs here so that uploads refused while they arrive (too large, a malformed
        form) are counted like the ones ingest refuses.
        """
        begun = time.perf_counter()
        name, outcome, rules = None, "error", []
        try:
            upload = await receive()
            name = upload.model_name
            description = await self._deploy(upload)
            outcome = "accepted"
            return description
        except ServiceError as exc:
            outcome = _outcome(exc, _UPLOAD_OUTCOMES)
            rules = [problem.rule for problem in exc.problems]
            raise
        finally:
            self.metrics.upload_finished(outcome, rules)
            log.info("upload model=%r outcome=%s problems=%d duration_s=%.6f", name, outcome,
                     len(rules), time.perf_counter() - begun)

    async def _deploy(self, upload: StagedUpload) -> dict:
        """The staging directory is always consumed."""
        try:
            if not upload.replace and self._exists(upload.model_name):
                raise Conflict(f"model {upload.model_name!r} exists; send replace=true to replace it")
            try:
                description = await asyncio.get_running_loop().run_in_executor(
                    self._ingest, run_ingest, upload, self.settings)
            except IngestRefused as refused:
                raise Invalid(f"upload refused: {len(refused.problems)} problem(s)",
                              refused.problems) from None
            async with self._lock(upload.model_name):
                return await self._commit(upload, description)
        finally:
            self.storage.discard(upload.directory)

    async def _commit(self, upload: StagedUpload, description: dict) -> dict:
        name = upload.model_name
        try:
            stored, replaced = await asyncio.to_thread(
                self.storage.commit, name, upload.directory, description, upload.replace)
        except NameTaken:
            raise Conflict(f"model {name!r} exists; send replace=true to replace it") from None
        reason = _not_runnable(stored)
        pool = await self._open_committed(stored, replaced) if reason is None else None
        previous = self._models.pop(name, None)
        if pool is None:
            self._unavailable[name] = (stored, reason)
        else:
            self._models[name] = _Served(stored, pool)
            self._unavailable.pop(name, None)
        if previous is not None:
            await previous.pool.close()
        if replaced is not None:
            await asyncio.to_thread(self.storage.remove_directory, replaced)
        return self._description(name)

    async def _open_committed(self, stored: StoredModel, replaced: StoredModel | None) -> ModelPool:
        """Opens a just-committed model; if it cannot be, the commit is undone before raising."""
        try:
            return await asyncio.to_thread(self._open_pool, stored)
        except Exception as exc:
            log.exception("model %s passed the load check but could not be opened", stored.name)
            if replaced is None:
                await asyncio.to_thread(self.storage.unregister, stored.name)
                await asyncio.to_thread(self.storage.remove_directory, stored)
            else:
                await asyncio.to_thread(self.storage.reinstate, replaced, stored)
            raise Unavailable(f"model {stored.name!r} could not be opened: {exc}") from None

    def _description(self, name: str) -> dict:
        served = self._models.get(name)
        if served is not None:
            return served.stored.description
        if name in self._unavailable:
            stored, reason = self._unavailable[name]
            return {**stored.description, "state": "unavailable", "error": reason}
        raise NotFound(f"model {name!r} not found")

    def list_models(self) -> list[dict]:
        return [self._description(name) for name in sorted({*self._models, *self._unavailable})]

    def describe(self, name: str) -> dict:
        return self._description(name)

    async def delete(self, name: str) -> None:
        async with self._lock(name):
            if not self._exists(name):
                raise NotFound(f"model {name!r} not found")
            served = self._models.pop(name, None)
            self._unavailable.pop(name, None)
            stored = await asyncio.to_thread(self.storage.unregister, name)
            if served is not None:
                await served.pool.close()
            if stored is not None:
                await asyncio.to_thread(self.storage.remove_directory, stored)
            self.metrics.forget_model(name)

    def metrics_text(self) -> str:
        return self.metrics.render({"ready": len(self._models),
                                    "unavailable": len(self._unavailable)})

    async def infer(self, model: str, method: str, inputs: list[dict]) -> dict:
        """Runs one request, then counts and logs it under names that exist (else UNKNOWN)."""
        begun = time.perf_counter()
        served = self._models.get(model)
        model_label = model if self._exists(model) else UNKNOWN
        method_label = method if served is not None and method in served.pool.method_names \
            else UNKNOWN
        token = self.metrics.request_started(model_label)
        queued: list[float] = []
        outcome = "error"
        try:
            result = await self._infer(served, model, method, inputs, queued.append)
            outcome = "ok"
            return result
        except ServiceError as exc:
            outcome = _outcome(exc, _INFER_OUTCOMES)
            raise
        finally:
            elapsed = time.perf_counter() - begun
            self.metrics.request_finished(token, model_label, method_label, outcome,
                                          queued[0] if queued else None, elapsed)
            log.info("infer model=%r method=%r outcome=%s duration_s=%.6f", model, method,
                     outcome, elapsed)

    async def _infer(self, served: _Served | None, model: str, method: str, inputs: list[dict],
                     acquired: Callable[[float], None]) -> dict:
        if served is None:
            if model in self._unavailable:
                raise Unavailable(f"model {model!r} is unavailable: {self._unavailable[model][1]}")
            raise NotFound(f"model {model!r} not found")
        if method not in served.pool.method_names:
            raise NotFound(f"model {model!r} has no method {method!r} (methods: "
                           f"{', '.join(served.pool.method_names)})")
        meta = served.pool.meta(method)
        arrays = _decode_inputs(inputs, meta["inputs"])
        try:
            results = await served.pool.run(method, arrays, self._executor, acquired)
        except PoolClosed:
            raise NotFound(f"model {model!r} is being deleted or replaced") from None
        except ValueError as exc:  # ethost.InputError: the host's own input validation
            label = f"input {getattr(exc, 'index', '?')}"
            raise _input_problem(getattr(exc, "input_name", None) or label, "input.invalid",
                                 str(exc)) from None
        except RuntimeError as exc:
            raise ExecutionFailed(f"executing {model!r} method {method!r} failed: {exc}") from None
        outputs = []
        for index, array in enumerate(results):
            spec = meta["outputs"][index] if index < len(meta["outputs"]) else {}
            outputs.append(tensor_codec.encode(np.asarray(array),
                                               spec.get("name") or f"output {index}",
                                               spec.get("dtype")))
        return {"model": model, "method": method, "outputs": outputs}


_INFER_OUTCOMES = ((Unavailable, "unavailable"), (NotFound, "client_error"),
                   (Invalid, "client_error"))
_UPLOAD_OUTCOMES = ((Invalid, "refused"), (TooLarge, "too_large"), (Conflict, "conflict"))


def _decode_inputs(inputs: list[dict], specs: list[dict]) -> list[np.ndarray]:
    if len(inputs) != len(specs):
        raise _input_problem(None, "input.count",
                             f"the method takes {len(specs)} input(s), the request has {len(inputs)}")
    arrays = []
    for index, (item, spec) in enumerate(zip(inputs, specs)):
        label = f"input {index}" + (f" ({item['name']!r})" if item.get("name") else "")
        if spec.get("tag", "Tensor") != "Tensor":
            raise _input_problem(label, "input.unsupported",
                                 f"{label} is a {spec['tag']} input; only tensor inputs are served")
        try:
            array = tensor_codec.decode(item.get("datatype"), item.get("shape"), item.get("data"),
                                        label)
        except tensor_codec.CodecError as exc:
            raise _input_problem(label, "input.data", str(exc)) from None
        expected = tensor_codec.datatype_of(spec["dtype"])
        if item["datatype"] != expected:
            raise _input_problem(label, "input.datatype",
                                 f"{label} must be {expected}, the request sends {item['datatype']}")
        _check_shape(label, list(array.shape), spec)
        arrays.append(array)
    return arrays


def _check_shape(label: str, shape: list[int], spec: dict) -> None:
    bound = spec["shape"]
    if len(shape) != len(bound):
        raise _input_problem(label, "input.shape",
                             f"{label} must have {len(bound)} dimension(s) {bound}, got {shape}")
    if spec.get("dynamic"):
        if any(d > b for d, b in zip(shape, bound)):
            raise _input_problem(label, "input.shape",
                                 f"{label} shape {shape} exceeds the upper bound {bound}")
    elif shape != bound:
        raise _input_problem(label, "input.shape", f"{label} must have shape {bound}, got {shape}")
