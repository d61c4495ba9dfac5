"""The protocol-neutral dataplane: deploy, list, describe, delete and infer.

Transports (HTTP today) translate requests into these calls and ServiceError subclasses into
their own status codes; nothing here knows about HTTP. In-memory `_models` decides what is
visible: a model enters it only once it is stored durably and its instances are ready.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from service import oip
from service.backends.registry import enabled, ingest_backends, setups
from service.config import Settings
from service.dataplane import residency, triton_config
from service.dataplane.kernel_errors import is_input_fault, kernel_reason
from service.dataplane.metrics import UNKNOWN, Metrics
from service.dataplane.model_pool import ModelPool, PoolClosed
from service.dataplane.repository import (
    MODEL_VERSION,
    UNLOADED,
    Repository,
    Served,
    not_runnable,
    refused_view,
    serve,
)
from service.dataplane.scheduler import Scheduler
from service.dataplane.signature import (
    bind_inputs,
    published_method,
    select_outputs,
    signature_of,
)
from service.dataplane.statistics import Statistics
from service.dataplane.types import (
    InferRequest,
    InferResponse,
    MethodSignature,
    ModelEntry,
    ModelTable,
    Tensor,
)
from service.dataplane.warmup import WarmupFailed, run_warmups
from service.errors import (
    Aborted,
    Busy,
    Conflict,
    DeadlineExceeded,
    ExecutionFailed,
    Invalid,
    NotFound,
    ServiceError,
    TooLarge,
    Unavailable,
    clip,
    input_problem,
    refused,
)
from service.ingest import child_guard
from service.ingest.model_config import instance_count
from service.ingest.model_dirs import find_entries
from service.ingest.pipeline import IngestRefused, run_ingest
from service.ingest.staging import StagedUpload, Staging
from service.inline_policy import InlinePolicy
from service.native_host import import_host
from service.store.records import ModelDescription, StoredModel
from service.store.storage import NameTaken, Storage

log = logging.getLogger(__name__)


def _outcome(exc: BaseException, outcomes: tuple) -> str:
    return next((name for kind, name in outcomes if isinstance(exc, kind)), "error")


class ModelService(Repository):
    def __init__(self, settings: Settings, keep_staging: bool = False):
        """`keep_staging`: an engine restarted under running fronts leaves the staging area to
        the uploads they are receiving."""
        self.settings = settings
        self._keep_staging = keep_staging
        self.storage: Storage | None = None
        self._ethost = None
        self._models: dict[str, Served] = {}
        # Stored but not served, with why; kept in memory so describing them reads no database.
        self._unavailable: dict[str, tuple[StoredModel, str]] = {}
        # Model directory entries ingest refused (nothing of them is stored), with why.
        self._refused: dict[str, ServiceError] = {}
        # One lock per model name, never dropped: a lock popped while a deploy waits on it would
        # let the next deploy of that name take a fresh one and commit concurrently.
        self._locks: dict[str, asyncio.Lock] = {}
        self._executor = ThreadPoolExecutor(settings.infer_threads, thread_name_prefix="infer")
        # Ingest (child load checks of up to load_check_timeout each) gets threads of its own, so
        # slow uploads queue here instead of starving the shared pool that parses request bodies
        # and commits, and at most this many uploads are checked at once.
        self._ingest = ThreadPoolExecutor(
            settings.max_concurrent_ingests, thread_name_prefix="ingest"
        )
        self.backends = enabled(settings.backends)
        self._ingest_backends = ingest_backends(settings)
        self.metrics = Metrics([backend.metrics() for backend in self.backends])
        self.statistics = Statistics()
        self._ready = False
        self._loading: asyncio.Task | None = None
        # Bumped on every change to what is served; engine fronts compare it with the model
        # table they cached (service/engine/) before trusting it.
        self.generation = 0
        self._listeners: list[Callable[[], None]] = []

    @property
    def ready(self) -> bool:
        return self._ready

    @ready.setter
    def ready(self, value: bool) -> None:
        self._ready = value
        self._changed()

    def on_change(self, listener: Callable[[], None]) -> None:
        """`listener()` runs after every change to readiness or to what is served."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        self.generation += 1
        for listener in self._listeners:
            listener()

    async def start(self) -> None:
        self.storage = Storage(self.settings.artifacts)
        self._ethost = import_host(setups(self.settings))
        # Before reconcile clears the staging area, where the children recorded themselves.
        await asyncio.to_thread(child_guard.reap_stale, self.storage.root)
        unloaded = await asyncio.to_thread(self.storage.unloaded)
        reconciled = await asyncio.to_thread(self.storage.reconcile, not self._keep_staging)
        for stored in reconciled:
            reason = UNLOADED if stored.name in unloaded else not_runnable(stored)
            if reason is not None:
                self._unavailable[stored.name] = (stored, reason)
                continue
            try:
                pool = await asyncio.to_thread(self._open_pool, stored)
            except Exception as exc:  # one broken model must not keep the others from serving
                log.error("model %s could not be loaded: %s", stored.name, exc)
                self._unavailable[stored.name] = (stored, f"{type(exc).__name__}: {exc}")
                continue
            self._models[stored.name] = serve(stored, pool)
        if self.settings.model_dirs:
            entries = find_entries(self.settings.model_dirs, self.settings.model_name)
            # Readiness waits for the directories; the server answers meanwhile.
            self._loading = asyncio.create_task(self._load_model_dirs(entries))
        else:
            self.ready = True

    async def stop(self) -> None:
        self.ready = False
        if self._loading is not None:
            self._loading.cancel()
            await asyncio.gather(self._loading, return_exceptions=True)
        for served in list(self._models.values()):
            await served.pool.close()
        self._executor.shutdown(wait=True)
        self._ingest.shutdown(wait=True)

    def _open_pool(self, stored: StoredModel) -> ModelPool:
        """Opens the model's instances and runs its warmups on them (WarmupFailed if one
        fails): a model serves only warmed."""
        pool = self.metrics.open_pool(
            stored.name,
            lambda: ModelPool(
                stored,
                self._ethost,
                instance_count(stored.description.config, self.settings.instances_per_model),
                self.settings.kernel_threadpool,
                InlinePolicy(self.settings.inline_execute_us).execute_below_s,
            ),
        )
        pool.warmup_s = run_warmups(pool, stored.description.config)
        return pool

    def body_buffer(self, nbytes: int) -> tuple[memoryview, None]:
        """Memory a protocol receives a request body into (a front's engine client gives a slot
        of shared memory instead)."""
        return memoryview(bytearray(nbytes)), None

    def begin_staging(self) -> Staging:
        """Where a transport puts an upload's files before handing it to deploy()."""
        return Staging(self.storage, self.settings)

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    def _exists(self, name: str) -> bool:
        return name in self._models or name in self._unavailable or name in self._refused

    async def deploy(self, receive: Callable[[], Awaitable[StagedUpload]]) -> dict:
        """Receives an upload (the transport's part: a form, a repository load, a folder), then
        deploys it. Receiving belongs here so that uploads refused while they arrive (too large,
        a malformed form) are counted like the ones ingest refuses."""
        begun = time.perf_counter()
        try:
            upload = await receive()
        except ServiceError as exc:
            self.upload_refused(None, exc, time.perf_counter() - begun)
            raise
        return await self.deploy_staged(upload, time.perf_counter() - begun)

    def upload_refused(self, name: str | None, error: ServiceError, elapsed_s: float) -> None:
        """Counts and logs an upload that was refused before it was staged whole."""
        self._upload_finished(
            name, _outcome(error, _UPLOAD_OUTCOMES), [p.rule for p in error.problems], elapsed_s
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

    async def deploy_staged(self, upload: StagedUpload, received_s: float = 0.0) -> dict:
        """Checks, stores and starts serving a staged upload (whose directory it consumes), then
        counts and logs the outcome; `received_s` is how long receiving it took."""
        begun = time.perf_counter() - received_s
        outcome, rules = "error", []
        try:
            description = await self._deploy(upload)
            outcome = "accepted"
            return description
        except ServiceError as exc:
            outcome = _outcome(exc, _UPLOAD_OUTCOMES)
            rules = [problem.rule for problem in exc.problems]
            raise
        finally:
            self._upload_finished(upload.model_name, outcome, rules, time.perf_counter() - begun)

    async def _deploy(self, upload: StagedUpload) -> dict:
        """The staging directory is always consumed."""
        try:
            if not upload.replace and self._exists(upload.model_name):
                raise Conflict(
                    f"model {upload.model_name!r} exists; send replace=true to replace it"
                )
            try:
                description = await asyncio.get_running_loop().run_in_executor(
                    self._ingest, run_ingest, upload, self.settings, self._ingest_backends
                )
            except IngestRefused as refusal:
                raise refused("upload refused", refusal.problems) from None
            async with self._lock(upload.model_name):
                return await self._commit(upload, description)
        finally:
            self.storage.discard(upload.directory)

    async def _commit(self, upload: StagedUpload, description: ModelDescription) -> dict:
        name = upload.model_name
        try:
            stored, replaced = await asyncio.to_thread(
                self.storage.commit, name, upload.directory, description, upload.replace
            )
        except NameTaken:
            raise Conflict(f"model {name!r} exists; send replace=true to replace it") from None
        reason = not_runnable(stored)
        pool = None
        if reason is None:
            try:
                pool = await self._open_committed(stored, replaced)
            except WarmupFailed as failed:  # stored, and unavailable with why
                reason = str(failed)
        previous = self._models.pop(name, None)
        self._refused.pop(name, None)
        if pool is None:
            self._unavailable[name] = (stored, reason)
        else:
            self._models[name] = serve(stored, pool)
            self._unavailable.pop(name, None)
        if previous is not None:
            await previous.pool.close()
        self._changed()
        if replaced is not None:
            await asyncio.to_thread(self.storage.remove_directory, replaced)
        return self._description(name)

    async def _open_committed(self, stored: StoredModel, replaced: StoredModel | None) -> ModelPool:
        """Opens a just-committed model; if it cannot be, the commit is undone before raising."""
        try:
            return await asyncio.to_thread(self._open_pool, stored)
        except WarmupFailed:
            raise
        except Exception as exc:
            log.exception("model %s passed the load check but could not be opened", stored.name)
            if replaced is None:
                await asyncio.to_thread(self.storage.unregister, stored.name)
                await asyncio.to_thread(self.storage.remove_directory, stored)
            else:
                await asyncio.to_thread(self.storage.reinstate, replaced, stored)
            raise Unavailable(f"model {stored.name!r} could not be opened: {exc}") from None

    def _description(self, name: str, files: dict[str, int] | None = None) -> dict:
        """`files`: residency.mapped_files(), when several models are described at once."""
        if name in self._refused:
            return refused_view(name, self._refused[name])
        served = self._models.get(name)
        if served is not None:
            view = served.stored.description.view("ready")
            view["memory"] = served.pool.memory(files).to_json()
            if served.pool.warmup_s is not None:
                view["warmup_s"] = served.pool.warmup_s
        elif name in self._unavailable:
            stored, reason = self._unavailable[name]
            view = stored.description.view("unavailable", reason)
        else:
            raise NotFound(f"model {clip(name)!r} not found")
        return {**view, "methods": [published_method(m) for m in view["methods"]]}

    # Protocols call these (and every public coroutine here) through an engine client in the
    # front processes, hence coroutines even where the answer is at hand.

    async def list_models(self) -> list[dict]:
        files = residency.mapped_files()  # read once for all of them
        return [self._description(name, files) for name in self._names()]

    async def describe(self, name: str) -> dict:
        return self._description(name)

    async def delete(self, name: str) -> None:
        # Checked before taking the lock: per-name locks exist only for names that existed, so
        # deletes of made-up names cannot grow memory.
        if not self._exists(name):
            raise NotFound(f"model {clip(name)!r} not found")
        async with self._lock(name):
            if not self._exists(name):
                raise NotFound(f"model {clip(name)!r} not found")
            served = self._models.pop(name, None)
            self._unavailable.pop(name, None)
            self._refused.pop(name, None)
            stored = await asyncio.to_thread(self.storage.unregister, name)
            self._changed()
            if served is not None:
                await served.pool.close()
            if stored is not None:
                await asyncio.to_thread(self.storage.remove_directory, stored)
            self.metrics.forget_model(name)
            self.statistics.forget(name)

    def _stored(self, name: str) -> StoredModel:
        if name in self._refused:
            raise Unavailable(self._refused[name].message)
        if name in self._models:
            return self._models[name].stored
        if name in self._unavailable:
            return self._unavailable[name][0]
        raise NotFound(f"model {clip(name)!r} not found")

    async def metrics_text(self) -> str:
        return self.metrics.render(
            {"ready": len(self._models), "unavailable": len(self._unavailable) + len(self._refused)}
        )

    # -- metadata -------------------------------------------------------------------------------

    def _check_version(self, name: str, version: str | None) -> None:
        if version not in (None, "", MODEL_VERSION):
            raise NotFound(
                f"model {clip(name)!r} has no version {clip(version)!r} (versions: {MODEL_VERSION})"
            )

    def serves(self, name: str, version: str | None = None) -> bool:
        """Whether the model (and version) serves now, from what this process holds: a
        protocol's early answer before it reads a body (model_ready says why not)."""
        return name in self._models and version in (None, "", MODEL_VERSION)

    async def model_ready(self, name: str, version: str | None = None) -> bool:
        """Whether the model (and version) exists and can serve now; unknown ones raise."""
        self._description(name)
        self._check_version(name, version)
        return name in self._models

    async def signatures(self, name: str, version: str | None = None) -> dict[str, MethodSignature]:
        """Each method's signature with its published tensor names (also of unavailable models,
        described from the file)."""
        stored = self._stored(name)
        self._check_version(name, version)
        return {m["name"]: signature_of(m) for m in stored.description.methods}

    async def model_config(self, name: str, version: str | None = None) -> dict:
        """The model's configuration as Triton's ModelConfig (service.dataplane.triton_config),
        also of unavailable models, described from the file."""
        stored = self._stored(name)
        self._check_version(name, version)
        description = stored.description
        return triton_config.model_config(
            description,
            instance_count(description.config, self.settings.instances_per_model),
            frozenset(b.id for b in self.backends if b.device == "gpu"),
        )

    async def model_names(self) -> list[str]:
        return self._names()

    def _names(self) -> list[str]:
        return sorted({*self._models, *self._unavailable, *self._refused})

    async def model_stats(self, name: str | None, version: str | None = None) -> list[dict]:
        """The statistics extension's entries: of one model (NotFound for an unknown model or
        version), or of every model when `name` is None."""
        if name is None:
            names = self._names()
        else:
            self._stored(name)
            self._check_version(name, version)
            names = [name]
        return [self.statistics.model_stats(n, version or MODEL_VERSION) for n in names]

    async def table(self) -> ModelTable:
        """What a front needs to check requests before they cross to the engine: the ready
        models' method signatures, as of `generation`."""
        return ModelTable(
            self.generation,
            {
                name: ModelEntry(dict(served.signatures), served.max_batch)
                for name, served in self._models.items()
            },
        )

    def arena_usage(self, front: int, in_use: int, size: int) -> None:
        """A front's report of its arena (service/engine/client.py), for /metrics."""
        self.metrics.arena_usage(front, in_use, size)

    def record_refused(self, model: str, method: str, outcome: str, elapsed_s: float) -> None:
        """Counts a request a front refused before it crossed (as infer() counts its own)."""
        self._finished(None, model, method, outcome, None, elapsed_s, {})

    # -- inference ------------------------------------------------------------------------------

    def _scheduler_for(self, served: Served, method: str) -> Scheduler:
        scheduler = served.schedulers.get(method)
        if scheduler is None:
            scheduler = served.schedulers[method] = Scheduler(
                served.stored.name,
                method,
                served.pool,
                served.stored.description.config or {},
                self._executor,
                self.metrics,
                self.statistics,
                MODEL_VERSION,
            )
        return scheduler

    async def infer(self, request: InferRequest) -> InferResponse:
        """Runs one request, then counts and logs it under names that exist (else UNKNOWN)."""
        begun = time.perf_counter()
        model, method = request.model, request.method
        served = self._models.get(model)
        model_label = model if self._exists(model) else UNKNOWN
        token = self.metrics.request_started(model_label)
        queued: list[float] = []
        phases: dict[str, int] = {}
        outcome = "error"
        try:
            response = await self._infer(served, request, queued.append, phases)
            outcome = "ok"
            return response
        except ServiceError as exc:
            outcome = _outcome(exc, _INFER_OUTCOMES)
            raise
        except asyncio.CancelledError:  # the client went away
            outcome = "cancelled"
            raise
        finally:
            elapsed_s = time.perf_counter() - begun
            queued_s = queued[0] if queued else None
            self._finished(token, model, method, outcome, queued_s, elapsed_s, phases, model_label)

    def infer_now(self, request: InferRequest) -> InferResponse | None:
        """infer() without a task or a wait, when the request can run at once and inline: its
        model method is scheduled directly (no queue), an instance is free and its recent
        executes are short. None: nothing was done, serve it with infer().

        For a small program the coroutines, task and semaphore of infer() cost several times
        the execute itself, and the engine's one thread serves every front: this is what
        bounds the server's throughput on a many-core host."""
        served = self._models.get(request.model)
        if served is None or request.version not in (None, "", MODEL_VERSION):
            return None
        signature = served.signatures.get(request.method)
        if signature is None:
            return None
        scheduler = self._scheduler_for(served, request.method)
        if not scheduler.can_run_now():
            return None
        begun = time.perf_counter_ns()
        model, method = request.model, request.method
        try:
            arrays, selected = self._bind(request, signature)
            bound = time.perf_counter_ns()
            try:
                results, rows, infer_ns = scheduler.run_now(arrays)
            except (ValueError, RuntimeError) as exc:
                raise _execution_error(exc, model, method) from None
            executed = time.perf_counter_ns()
            response = _response(request, signature, selected, results)
        except ServiceError as exc:
            elapsed_s = (time.perf_counter_ns() - begun) / 1e9
            self._finished(None, model, method, _outcome(exc, _INFER_OUTCOMES), 0.0, elapsed_s, {})
            raise
        done = time.perf_counter_ns()
        self.statistics.record_served(
            model, MODEL_VERSION, rows, done - begun, bound - begun, infer_ns, done - executed
        )
        self.metrics.record_served(model, method, rows, (done - begun) / 1e9)
        if self.settings.access_log:
            self._log(model, method, "ok", (done - begun) / 1e9)
        return response

    def _finished(
        self, token, model, method, outcome, queued_s, elapsed_s, phases, model_label=None
    ) -> None:
        """Counts one request once, in the metrics and the statistics, under names that exist
        (else UNKNOWN, and in the metrics only), and logs it under the names it gave.
        `model_label`: the one its request_started token was taken under."""
        served = self._models.get(model)
        if model_label is None:
            model_label = model if served is not None or self._exists(model) else UNKNOWN
        method_label = method if served is not None and method in served.signatures else UNKNOWN
        self.metrics.request_finished(
            token, model_label, method_label, outcome, queued_s, elapsed_s
        )
        if model_label != UNKNOWN:
            self.statistics.record_request(
                model,
                MODEL_VERSION,
                outcome == "ok",
                int(elapsed_s * 1e9),
                None if queued_s is None else int(queued_s * 1e9),
                phases.get("input"),
                phases.get("infer"),
                phases.get("output"),
            )
        if self.settings.access_log:
            self._log(model, method, outcome, elapsed_s)

    @staticmethod
    def _log(model: str, method: str, outcome: str, elapsed_s: float) -> None:
        log.info(
            "infer model=%r method=%r outcome=%s duration_s=%.6f",
            clip(model),
            clip(method),
            outcome,
            elapsed_s,
        )

    def _bind(self, request: InferRequest, signature: MethodSignature) -> tuple[list, list]:
        """The input arrays in the method's order, and the indices of the outputs asked for."""
        if request.checked_at == self.generation:  # a front checked them against this signature
            arrays = [tensor.array for tensor in request.inputs]
        else:
            arrays = bind_inputs(request.inputs, signature)
        return arrays, select_outputs(signature, request.outputs)

    async def _infer(
        self,
        served: Served | None,
        request: InferRequest,
        acquired: Callable[[float], None],
        phases: dict[str, int],
    ) -> InferResponse:
        """`phases` receives the nanoseconds spent checking inputs, executing (after the wait for
        an instance) and collecting outputs, for the statistics extension."""
        model, method = request.model, request.method
        if served is None:
            if model in self._refused:
                raise Unavailable(self._refused[model].message)
            if model in self._unavailable:
                raise Unavailable(f"model {model!r} is unavailable: {self._unavailable[model][1]}")
            raise NotFound(f"model {clip(model)!r} not found")
        self._check_version(model, request.version)
        signature = served.signatures.get(method)
        if signature is None:
            raise NotFound(
                f"model {model!r} has no method {clip(method)!r} (methods: "
                f"{', '.join(served.pool.method_names)})"
            )
        mark = time.perf_counter_ns()
        arrays, selected = self._bind(request, signature)
        phases["input"] = time.perf_counter_ns() - mark

        def started(waited: float) -> None:
            nonlocal mark
            mark = time.perf_counter_ns()
            acquired(waited)

        try:
            results = await self._scheduler_for(served, method).submit(
                arrays, request.timeout_s, started, request.parameters.get(oip.PRIORITY_PARAMETER)
            )
        except PoolClosed:
            raise Unavailable(f"model {model!r} is being deleted or replaced") from None
        except (ValueError, RuntimeError) as exc:
            raise _execution_error(exc, model, method) from None
        phases["infer"] = time.perf_counter_ns() - mark
        mark = time.perf_counter_ns()
        response = _response(request, signature, selected, results)
        phases["output"] = time.perf_counter_ns() - mark
        return response


def _response(
    request: InferRequest, signature: MethodSignature, selected, results
) -> InferResponse:
    outputs = []
    for index in selected:
        spec = signature.outputs[index]
        outputs.append(Tensor(spec.name, spec.datatype, results[index]))
    return InferResponse(request.model, MODEL_VERSION, request.method, request.id, outputs)


def _execution_error(exc: Exception, model: str, method: str) -> ServiceError:
    """What an execute's failure means for the client: the host's own input validation
    (ethost.InputError, a ValueError), a kernel refusing the inputs, or a real failure."""
    if isinstance(exc, ValueError):
        label = getattr(exc, "input_name", None) or f"input {getattr(exc, 'index', '?')}"
        return input_problem(label, "input.invalid", str(exc))
    if is_input_fault(exc):
        reason = kernel_reason(exc)
        # One line per refused input: the host captures ExecuTorch's own lines instead of
        # printing them, so this is the only trace of it in the log.
        log.warning("infer model=%r method=%r outcome=input_rejected: %s", model, method, reason)
        return input_problem(
            None,
            "input.rejected",
            f"model {model!r} method {method!r} rejected the inputs while executing: {reason}",
        )
    return ExecutionFailed(f"executing {model!r} method {method!r} failed: {kernel_reason(exc)}")


_INFER_OUTCOMES = (
    (Unavailable, "unavailable"),
    (Busy, "busy"),
    (DeadlineExceeded, "deadline_exceeded"),
    (NotFound, "client_error"),
    (Invalid, "client_error"),
)
_UPLOAD_OUTCOMES = (
    (Aborted, "aborted"),
    (Invalid, "refused"),
    (TooLarge, "too_large"),
    (Conflict, "conflict"),
)
