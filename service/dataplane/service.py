"""The protocol-neutral dataplane: deploy, list, describe, delete and infer.

Transports (HTTP today) translate requests into these calls and ServiceError subclasses into
their own status codes; nothing here knows about HTTP. The in-memory catalog (model name ->
service.dataplane.catalog.Model) decides what is visible: a version enters it only once it is
stored durably, and serves only once its instances are ready. Deploying, inference and the
repository calls are mixins of their own (deployment.py, inference.py, repository.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

from service.backends.registry import enabled, ingest_backends, setups
from service.config import Settings
from service.dataplane import instances, residency, triton_config
from service.dataplane.catalog import Model, parse_version
from service.dataplane.deployment import Deployment
from service.dataplane.gpu_faults import GpuFaults
from service.dataplane.inference import Inference
from service.dataplane.ledger import ServedLedger
from service.dataplane.metrics import MemoryReadings, Metrics
from service.dataplane.repository import Repository, refused_view
from service.dataplane.signature import published_method, signature_of
from service.dataplane.statistics import Statistics
from service.dataplane.types import MethodSignature, ModelEntry, ModelTable
from service.errors import NotFound, ServiceError, Unavailable, clip
from service.gpu_gauges import GpuGauges
from service.ingest import child_guard
from service.ingest.model_dirs import find_entries
from service.ingest.staging import Staging
from service.native_host import import_host
from service.shared.contract import Capability
from service.shared.engine_events import EngineEvents
from service.store.storage import Storage

log = logging.getLogger(__name__)
NOT_READY = "the server is starting or stopping"


class ModelService(Deployment, Inference, Repository):
    # Everything runs in this process: no engine link, no client shared memory regions.
    capabilities: ClassVar[Capability] = Capability.NONE

    def __init__(self, settings: Settings, keep_staging: bool = False):
        """`keep_staging`: an engine restarted under running fronts leaves the staging area to
        the uploads they are receiving."""
        self.settings = settings
        self._keep_staging = keep_staging
        self.storage: Storage | None = None
        self._ethost = None
        # Every stored model with its versions, served or not (why not, too): describing them
        # reads no database.
        self._catalog: dict[str, Model] = {}
        # Program path -> model, from its load on (a fault during a warmup is named too).
        self._program_owners: dict[str, str] = {}
        # Model directory entries ingest refused (nothing of them is stored), with why.
        self._refused: dict[str, ServiceError] = {}
        # One lock per model name, never dropped: a lock popped while a deploy waits on it would
        # let the next deploy of that name take a fresh one and commit concurrently.
        self._locks: dict[str, asyncio.Lock] = {}
        self._executor = ThreadPoolExecutor(settings.infer_threads, thread_name_prefix="infer")
        # Every model load of this process (ExecuTorch programs, their methods' instances, the
        # delegates' engines and contexts) runs on this one thread, one after another: two loads
        # at once are what upstream measured unsafe (ExecuTorch's Python loads crashed 1 in 6;
        # TensorRT must create no engine while another thread records a CUDA graph).
        self._loader = ThreadPoolExecutor(1, thread_name_prefix="load")
        # Ingest (child load checks of up to load_check_timeout each) gets threads of its own, so
        # slow uploads queue here instead of starving the shared pool that parses request bodies
        # and commits, and at most this many uploads are checked at once.
        self._ingest = ThreadPoolExecutor(
            settings.max_concurrent_ingests, thread_name_prefix="ingest"
        )
        self.backends = enabled(settings.backends)
        self._ingest_backends = ingest_backends(settings)
        # One ledger of the requests served at once, which both views count from.
        self.ledger = ServedLedger()
        # Absent (no families) where NVML is not: see service/gpu_gauges.py.
        self.gpu_gauges = GpuGauges.from_nvml() if settings.gpu_metrics else GpuGauges(None)
        # Sticky GPU faults: this process's, and the server's run's from before (quarantine).
        self.gpu_faults = GpuFaults(
            EngineEvents.from_env(),
            self._sticky_fault,
            self._owner,
            settings.gpu_fault_quarantine_count,
            settings.gpu_fault_quarantine_window_s,
        )
        self.gpu_faults.on_fault(lambda _: self._changed())
        self.metrics = Metrics(
            [backend.metrics() for backend in self.backends],
            self.ledger,
            [self.gpu_gauges, self.gpu_faults],
        )
        self._memory = MemoryReadings(self.metrics.measure_memory)
        self.statistics = Statistics(self.ledger)
        self._ready = False
        self._loading: asyncio.Task | None = None
        # Bumped on every change to what is served; engine fronts compare it with the model
        # table they cached (service/engine/) before trusting it.
        self.generation = 0
        self._routes: dict = {}  # infer_now's, per (model, version, method)
        self._listeners: list[Callable[[], None]] = []

    @property
    def ready(self) -> bool:
        """Ready: started, and the device context works (a GPU fault ends readiness at once)."""
        return self._ready and self.gpu_faults.fault is None

    def not_ready_reason(self) -> str:
        """What /v2/health/ready says while the server is not ready."""
        poisoned = self.gpu_faults.refusal()
        return poisoned.message if poisoned is not None else NOT_READY

    def _sticky_fault(self) -> tuple[str, list[str]] | None:
        return None if self._ethost is None else self._ethost.sticky_fault()

    def _owner(self, program_path: str) -> str | None:
        """The model whose version runs the program at `program_path` (served or loading)."""
        return self._program_owners.get(program_path)

    @ready.setter
    def ready(self, value: bool) -> None:
        self._ready = value
        self._changed()

    def on_change(self, listener: Callable[[], None]) -> None:
        """`listener()` runs after every change to readiness or to what is served."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        self.generation += 1
        self._routes.clear()
        for listener in self._listeners:
            listener()

    async def start(self) -> None:
        self.storage = Storage(self.settings.artifacts)
        self.gpu_gauges.start()
        self._ethost = import_host(setups(self.settings))
        # Before reconcile clears the staging area, where the children recorded themselves.
        await asyncio.to_thread(child_guard.reap_stale, self.storage.root)
        unloaded = await asyncio.to_thread(self.storage.unloaded)
        reconciled = await asyncio.to_thread(self.storage.reconcile, not self._keep_staging)
        for stored in reconciled:
            entry = self._catalog.setdefault(stored.name, Model(stored.name))
            entry.stored[stored.version] = stored
            if (stored.name, stored.version) in unloaded:
                entry.unloaded.add(stored.version)
        for entry in self._catalog.values():
            # One broken version must not keep the others (or other models) from serving.
            await self._settle(entry, dict(entry.stored))
        if self.settings.model_dirs:
            entries = find_entries(self.settings.model_dirs, self.settings.model_name)
            # Readiness waits for the directories; the server answers meanwhile.
            self._loading = asyncio.create_task(self._load_model_dirs(entries))
        else:
            self.ready = True

    async def stop(self) -> None:
        self.ready = False
        self.gpu_gauges.stop()
        if self._loading is not None:
            self._loading.cancel()
            await asyncio.gather(self._loading, return_exceptions=True)
        for entry in list(self._catalog.values()):
            for served in list(entry.served.values()):
                await served.pool.close()
        self._executor.shutdown(wait=True)
        self._ingest.shutdown(wait=True)
        self._loader.shutdown(wait=True)

    def begin_staging(self) -> Staging:
        """Where a transport puts an upload's files before handing it to deploy()."""
        return Staging(self.storage, self.settings)

    def _lock(self, name: str) -> asyncio.Lock:
        return self._locks.setdefault(name, asyncio.Lock())

    def _exists(self, name: str) -> bool:
        return name in self._catalog or name in self._refused

    def _entry(self, name: str) -> Model:
        """The stored model (Unavailable for a refused model directory entry, else NotFound)."""
        if name in self._refused:
            raise Unavailable(self._refused[name].message)
        entry = self._catalog.get(name)
        if entry is None:
            raise NotFound(f"model {clip(name)!r} not found")
        return entry

    def _description(
        self, name: str, files: dict[str, int] | None = None, version: int | None = None
    ) -> dict:
        """The native API's description: of the default version (the highest served, else the
        newest stored) or of `version`, listing every version with its state. `files`:
        residency.mapped_files(), when several models are described at once."""
        if name in self._refused:
            return refused_view(name, self._refused[name])
        entry = self._catalog.get(name)
        if entry is None:
            raise NotFound(f"model {clip(name)!r} not found")
        view = self._version_view(entry, entry.stored_version(version).version, files)
        view["versions"] = [
            {
                key: value
                for key, value in self._version_view(entry, v, files).items()
                if key in _VERSION_FIELDS
            }
            for v in sorted(entry.stored)
        ]
        return view

    def _version_view(self, entry: Model, version: int, files: dict[str, int] | None) -> dict:
        served = entry.served.get(version)
        stored = entry.stored[version]
        if served is not None:
            view = stored.description.view("ready")
            view["memory"] = served.pool.memory(files).to_json()
            view.update(self.metrics.backend_views(entry.name))
            if served.pool.warmup_s is not None:
                view["warmup_s"] = served.pool.warmup_s
        else:
            view = stored.description.view("unavailable", entry.reason(version))
        view["version"] = str(version)
        return {**view, "methods": [published_method(m) for m in view["methods"]]}

    # Protocols call these (and every public coroutine here) through an engine client in the
    # front processes, hence coroutines even where the answer is at hand.

    async def list_models(self) -> list[dict]:
        files = residency.mapped_files()  # read once for all of them
        return [self._description(name, files) for name in self._names()]

    async def describe(self, name: str, version: str | None = None) -> dict:
        return self._description(name, None, parse_version(name, version))

    async def delete(self, name: str, version: str | None = None) -> None:
        """Deletes the model, or one version of it (the policy then serves what it selects
        of the others); requests already running finish first."""
        # Checked before taking the lock: per-name locks exist only for names that existed, so
        # deletes of made-up names cannot grow memory.
        number = parse_version(name, version)
        if not self._exists(name):
            raise NotFound(f"model {clip(name)!r} not found")
        async with self._lock(name):
            if not self._exists(name):
                raise NotFound(f"model {clip(name)!r} not found")
            entry = self._catalog.get(name)
            if number is not None:
                if entry is None:
                    raise NotFound(f"model {clip(name)!r} has no version {number}")
                entry.stored_version(number)  # NotFound naming the versions
                if len(entry.stored) > 1:
                    return await self._delete_version(entry, number)
            self._catalog.pop(name, None)
            self._refused.pop(name, None)
            stored = await asyncio.to_thread(self.storage.unregister, name)
            self._changed()
            for served in entry.served.values() if entry is not None else ():
                await self._close(served)
            for model in stored:
                await asyncio.to_thread(self.storage.remove_directory, model)
            self.metrics.forget_model(name)
            self.statistics.forget(name)

    async def _delete_version(self, entry: Model, version: int) -> None:
        stored = {v: s for v, s in entry.stored.items() if v != version}
        removed = await asyncio.to_thread(self.storage.unregister, entry.name, version)
        closing = await self._settle(entry, stored)
        self._changed()
        for served in closing:
            await self._close(served)
        for model in removed:
            await asyncio.to_thread(self.storage.remove_directory, model)
        self.statistics.forget(entry.name, str(version))

    async def metrics_text(self) -> str:
        """The /metrics page. Its slow part, the memory gauges, is measured off this loop (in a
        worker thread, at most once a second: MemoryReadings); the counters are read here."""
        memory = await self._memory.current(self.generation)
        ready = sum(1 for entry in self._catalog.values() if entry.served)
        return self.metrics.render(
            {"ready": ready, "unavailable": len(self._catalog) - ready + len(self._refused)}, memory
        )

    # -- metadata -------------------------------------------------------------------------------

    def serves(self, name: str, version: str | None = None) -> bool:
        """Whether the model (and version) serves now, from what this process holds: a
        protocol's early answer before it reads a body (model_ready says why not)."""
        entry = self._catalog.get(name)
        if entry is None:
            return False
        if not version:
            return bool(entry.served)
        try:
            return parse_version(name, version) in entry.served
        except NotFound:
            return False

    async def model_ready(self, name: str, version: str | None = None) -> bool:
        """Whether the model can serve now; an unknown model, an unknown version and a version
        not served raise NotFound (gRPC's ModelReady answers those not ready). Fronts ask it
        for requests whose model their table does not list: it must cost no more than a lookup
        (a description reads the process's memory map, milliseconds on a CUDA host)."""
        if not self._exists(name):
            raise NotFound(f"model {clip(name)!r} not found")
        number = parse_version(name, version)
        entry = self._catalog.get(name)
        if entry is None:  # a refused model directory entry
            return False
        if number is None:
            return bool(entry.served)
        entry.served_version(number)
        return True

    def _served_stored(self, name: str, version: str | None):
        """The stored version a metadata call describes: the version named, which must be
        served, or the default one (also of an unavailable model, described from the file)."""
        entry = self._entry(name)
        number = parse_version(name, version)
        if number is None:
            return entry.stored_version(None)
        return entry.served_version(number).stored

    async def signatures(self, name: str, version: str | None = None) -> dict[str, MethodSignature]:
        """Each method's signature with its published tensor names (also of unavailable models,
        described from the file)."""
        stored = self._served_stored(name, version)
        return {m["name"]: signature_of(m) for m in stored.description.methods}

    async def served_versions(self, name: str) -> list[str]:
        """The model's served versions, ascending (model metadata lists them)."""
        return [str(v) for v in sorted(self._entry(name).served)]

    async def model_config(self, name: str, version: str | None = None) -> dict:
        """The model's configuration as Triton's ModelConfig (service.dataplane.triton_config),
        also of unavailable models, described from the file."""
        description = self._served_stored(name, version).description
        count = description.effective_config.instance_count or self.settings.instances_per_model
        if count is None:  # automatic: what the served version loaded, else the base
            served = self._find(name, version)
            methods = [] if served is None else served.pool.method_names
            count = served.pool.instance_count(methods[0]) if methods else instances.BASE
        return triton_config.model_config(
            description,
            count,
            frozenset(b.id for b in self.backends if b.device == "gpu"),
        )

    async def model_names(self) -> list[str]:
        return self._names()

    def _names(self) -> list[str]:
        return sorted({*self._catalog, *self._refused})

    async def model_stats(self, name: str | None, version: str | None = None) -> list[dict]:
        """The statistics extension's entries, one per served version: of one model (or one
        version; NotFound for an unknown model or version), or of every model when `name` is
        None."""
        if name is not None:
            number = parse_version(name, version)
            entry = self._entry(name)
            if number is not None:
                entry.served_version(number)
                return [self.statistics.model_stats(name, str(number))]
        entries = []
        for model in [name] if name is not None else self._names():
            entry = self._catalog.get(model)
            versions = sorted(entry.served) if entry is not None else []
            if entry is not None and not versions:  # an unavailable model: its default version
                versions = [entry.stored_version(None).version]
            entries += [self.statistics.model_stats(model, str(v)) for v in versions]
        return entries

    async def table(self) -> ModelTable:
        """What a front needs to check requests before they cross to the engine: the served
        versions' method signatures (and each model's default version), as of `generation`."""
        versions, defaults = {}, {}
        for name, entry in self._catalog.items():
            for version, served in entry.served.items():
                versions[(name, str(version))] = ModelEntry(
                    dict(served.signatures),
                    served.max_batch,
                    str(version),
                    self._lane_methods(served),
                )
            if entry.served:
                defaults[name] = versions[(name, str(max(entry.served)))]
        return ModelTable(self.generation, defaults, versions)

    def arena_usage(self, front: int, in_use: int, size: int, native: int = 0) -> None:
        """A front's report of its arena and of the requests its native path answered
        (service/front/engine_client.py), for /metrics."""
        self.metrics.arena_usage(front, in_use, size, native)


# What the description lists of each version.
_VERSION_FIELDS = ("version", "state", "error", "files", "warmup_s", "unavailable_reason")
