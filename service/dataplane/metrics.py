"""Counters of what the dataplane did, rendered in Prometheus' text format (service/prometheus.py).

The core updates them and any transport renders them; nothing here knows about HTTP.

Cardinality stays bounded: model names have passed the ingest name rules, method names come from
stored programs, and a request naming a model or method that does not exist is counted under
UNKNOWN, never under the client's string. Deleting a model removes its series.

Requests served at once by the engine's shortest path are counted from the one ledger of them
(service/dataplane/ledger.py) when next rendered, summed per model and method.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import weakref
from collections.abc import Callable

import numpy as np

from service.dataplane import residency
from service.dataplane.ledger import ServedGroup, ServedLedger
from service.prometheus import BATCH_SIZE_BUCKETS, Counter, Gauge, Histogram

# No model name can contain parentheses (ingest rule model.characters), so this never collides.
UNKNOWN = "(unknown)"
# How long the memory gauges of one model table are reused by the next scrapes.
MEMORY_FRESH_S = 1.0


class MemoryReadings:
    """The memory gauges for /metrics (Metrics.measure_memory), measured in a worker thread at
    most once per MEMORY_FRESH_S for one model table (`generation`): a measure costs the engine
    milliseconds of Python holding the GIL its executes' threads and event loop need, and
    scrapes every few milliseconds (a dashboard, probes) would spend a core on it under load.
    Scrapes that arrive while one is measured wait for that one."""

    def __init__(self, measure: Callable[[], list]):
        self._measure = measure
        self._taken: tuple[int, float, list] | None = None  # generation, when, gauges
        self._running: tuple[int, asyncio.Future] | None = None

    async def current(self, generation: int) -> list:
        taken = self._taken
        if taken and taken[0] == generation and time.monotonic() - taken[1] < MEMORY_FRESH_S:
            return taken[2]
        running = self._running
        if running is None or running[0] != generation or running[1].done():
            running = self._running = (generation, asyncio.ensure_future(self._take(generation)))
        return await asyncio.shield(running[1])

    async def _take(self, generation: int) -> list:
        gauges = await asyncio.to_thread(self._measure)
        self._taken = (generation, time.monotonic(), gauges)
        return gauges


class Metrics:
    """The server's metrics; updated from the event loop and worker threads, hence the lock."""

    def __init__(
        self,
        backends: list | None = None,
        ledger: ServedLedger | None = None,
        sources: list | None = None,
    ):
        """`backends`: the enabled backends' metrics (service.backends.base.BackendMetrics);
        `ledger`: the requests served at once, shared with the statistics; `sources`: more
        families to render, not tied to models (anything with families(): the GPU gauges)."""
        self._lock = threading.Lock()
        self.requests = Counter(
            "etrt_inference_requests_total",
            "Inference requests by outcome (ok, client_error, unavailable, error)",
            ("model", "method", "outcome"),
        )
        self.duration = Histogram(
            "etrt_inference_duration_seconds",
            "Inference request time: decoding, waiting for a free instance, executing, encoding",
            ("model", "method"),
        )
        self.queue = Histogram(
            "etrt_inference_queue_seconds",
            "Time an inference request waited for a free method instance",
            ("model", "method"),
        )
        self.inflight = Gauge(
            "etrt_inflight_requests", "Inference requests being served", ("model",)
        )
        self.uploads = Counter(
            "etrt_uploads_total",
            "Model uploads by outcome (accepted, refused, too_large, conflict, aborted, error)",
            ("outcome",),
        )
        self.problems = Counter(
            "etrt_ingest_problems_total", "Problems found in refused uploads, by rule id", ("rule",)
        )
        self.batch_size = Histogram(
            "etrt_batch_size",
            "Rows per execute (requests merged by dynamic batching; 1 per request otherwise)",
            ("model", "method"),
            BATCH_SIZE_BUCKETS,
        )
        self.fronts = Counter(
            "etrt_front_requests_total",
            "Inference requests each protocol front process sent to the engine",
            ("front",),
        )
        self._front_requests: dict[int, int] = {}
        self.lane = Counter(
            "etrt_engine_lane_requests_total",
            "Inference requests the engine's native lane served without its Python (requests "
            "to directly scheduled methods, and to batched ones it merged); the others took "
            "its event loop",
            ("model", "method"),
        )
        self.native = Counter(
            "etrt_front_native_requests_total",
            "Inference requests each front read and answered in its native path, without its "
            "Python per request (counted by the front since it started)",
            ("front",),
        )
        self.arenas = Gauge(
            "etrt_arena_bytes",
            "Shared memory of each front's arena for request tensors: in_use now, and size",
            ("front", "state"),
        )
        self.backends = [m for m in (backends or []) if m is not None]
        self.sources = list(sources or [])
        self._ledger = ServedLedger() if ledger is None else ledger
        self._ledger.subscribe(self._count_served)
        self._live: dict[str, object] = {}
        # (model, method, version) -> the scheduler's current queue depth, read when rendering;
        # the gauge sums a model's versions.
        self._queues: dict[tuple[str, str, str], Callable[[], int]] = {}
        # (model, version) -> its serving pool, whose memory is measured when rendering (weak: a
        # replaced or deleted version's pool must not be kept alive by its metrics).
        self._pools: dict[tuple[str, int], weakref.ref] = {}
        self.digest_checks = Counter(
            "etrt_model_digest_checks_total",
            "Checks of a model version's stored files against the sha-256 recorded at ingest, "
            "run before every load, by outcome (ok; mismatch: the version is not loaded)",
            ("model", "outcome"),
        )
        self.digest_seconds = Gauge(
            "etrt_model_digest_check_seconds",
            "Seconds the last passing digest check of a model's files took (at load only)",
            ("model",),
        )
        self.warmups = Gauge(
            "etrt_model_warmup_seconds",
            "Seconds a served model version's model_warmup took, on every instance, before it "
            "served",
            ("model", "version"),
        )

    def request_started(self, model: str) -> object:
        """Returns a token for request_finished; a model deleted meanwhile invalidates it."""
        with self._lock:
            token = self._live.setdefault(model, object())
            self.inflight.add((model,), 1)
            return token

    def request_finished(
        self,
        token: object,
        model: str,
        method: str,
        outcome: str,
        queued_s: float | None,
        total_s: float,
    ) -> None:
        """`token`: request_started's, or None for a request counted only once it is done (one
        served without a wait, or refused by a front)."""
        with self._lock:
            if token is not None:
                if self._live.get(model) is not token:  # its series went with the model
                    return
                self.inflight.add((model,), -1)
            self.requests.add((model, method, outcome))
            self.duration.observe((model, method), total_s)
            if queued_s is not None:
                self.queue.observe((model, method), queued_s)

    def _count_served(self, groups: list[ServedGroup]) -> None:
        """The ledger's requests, each a finished request (ok) and, unless a batch's first
        request carried it, an execute."""
        sums = {}
        fronts = self._front_requests
        for group in groups:
            found = sums.get((group.model, group.method))
            if found is None:
                found = sums[(group.model, group.method)] = ([], {}, [0], [])
            found[0].append(group.totals_s)
            if group.executes:
                found[1][group.rows] = found[1].get(group.rows, 0) + group.executes
            if group.front >= 0:  # the engine's lane served them; its loop never saw them
                fronts[group.front] = fronts.get(group.front, 0) + group.count
                found[2][0] += group.count
            found[3].append(group.queued_s)
        with self._lock:
            for (model, method), (totals, sizes, lane, waits) in sums.items():
                labels = (model, method)
                durations, queued = np.concatenate(totals), np.concatenate(waits)
                if lane[0]:
                    self.lane.add(labels, lane[0])
                self.requests.add((model, method, "ok"), len(durations))
                self.duration.observe_many(labels, durations)
                if len(durations) > len(queued):
                    self.queue.observe(labels, 0.0, len(durations) - len(queued))
                self.queue.observe_many(labels, queued)
                for rows, count in sizes.items():
                    self.batch_size.observe(labels, rows, count)

    def front_request(self, front: int) -> None:
        """Called on the engine's loop for every request, so a plain count (the loop is its
        only writer); the family takes the counts when rendered."""
        self._front_requests[front] = self._front_requests.get(front, 0) + 1

    def arena_usage(self, front: int, in_use: int, size: int, native: int = 0) -> None:
        with self._lock:
            self.arenas.samples[(str(front), "in_use")] = in_use
            self.arenas.samples[(str(front), "size")] = size
            self.native.samples[(str(front),)] = native

    def batch_executed(self, model: str, method: str, rows: int) -> None:
        with self._lock:
            self.batch_size.observe((model, method), rows)

    def watch_queue(
        self, model: str, method: str, depth: Callable[[], int], version: str = "1"
    ) -> None:
        """Registers the live queue depth of a model method (replacing a replaced model's)."""
        with self._lock:
            self._queues[(model, method, version)] = depth

    def _queue_depths(self) -> Gauge:
        depths = Gauge(
            "etrt_queue_depth",
            "Requests waiting to execute: queued for a dynamic batch or for a free method instance",
            ("model", "method"),
        )
        for (model, method, _), depth in self._queues.items():
            depths.add((model, method), depth())
        return depths

    def upload_finished(self, outcome: str, rules: list[str]) -> None:
        with self._lock:
            self.uploads.add((outcome,))
            for rule in rules:
                self.problems.add((rule,))

    def open_pool(self, model: str, open_pool: Callable, version: int = 1):
        """Runs open_pool() so that each backend can count the delegates it creates for `model`."""
        for backend in self.backends:
            open_pool = functools.partial(backend.open, model, open_pool)
        pool = open_pool()
        with self._lock:
            self._pools[(model, version)] = weakref.ref(pool)
        return pool

    def backend_views(self, model: str) -> dict:
        """What the backends add to a served model's description (device memory, knobs)."""
        view: dict = {}
        for backend in self.backends:
            view.update(backend.describe(model))
        return view

    def digest_checked(self, model: str, outcome: str, seconds: float | None = None) -> None:
        with self._lock:
            self.digest_checks.add((model, outcome))
            if seconds is not None:
                self.digest_seconds.samples[(model,)] = seconds

    def warmed_up(self, model: str, version: int, seconds: float | None) -> None:
        """A version's warmups took `seconds` (None: it has none) before it served."""
        with self._lock:
            if seconds is None:
                self.warmups.samples.pop((model, str(version)), None)
            else:
                self.warmups.samples[(model, str(version))] = seconds

    def forget_pool(self, model: str, version: int) -> None:
        """A version's pool closed (unloaded, deleted, replaced, or out of its policy)."""
        with self._lock:
            ref = self._pools.get((model, version))
            if ref is not None and (ref() is None or ref().closed):
                del self._pools[(model, version)]
                self.warmups.samples.pop((model, str(version)), None)

    def forget_model(self, model: str) -> None:
        self._ledger.fold()
        with self._lock:
            self._live.pop(model, None)
            for family in (
                self.requests,
                self.duration,
                self.queue,
                self.inflight,
                self.batch_size,
                self.lane,
                self.digest_checks,
                self.digest_seconds,
            ):
                family.remove("model", model)
            self._queues = {k: v for k, v in self._queues.items() if k[0] != model}
            self._pools = {k: v for k, v in self._pools.items() if k[0] != model}
            self.warmups.remove("model", model)
            for backend in self.backends:
                backend.forget(model)

    def measure_memory(self) -> list[Gauge]:
        """The models' memory gauges, measured now (see service.dataplane.residency), for
        render(). It reads /proc/self/smaps and mincore()s every planned arena: milliseconds,
        and up to hundreds while executes fault pages in (they take the same mm lock), so the
        engine runs it in a worker thread, never on the event loop that serves inference, and
        outside the lock."""
        resident = Gauge(
            "etrt_model_resident_bytes",
            "Bytes of a model resident in the engine process: pages of its mapped .pte/.ptd files "
            "(memory=files) and the written part of its instances' planned arenas "
            "(memory=planned_arenas)",
            ("model", "memory"),
        )
        planned = Gauge(
            "etrt_model_planned_arena_bytes",
            "Host memory allocated for the planned arenas of a model's method instances",
            ("model",),
        )
        with self._lock:
            pools = [(key[0], ref()) for key, ref in self._pools.items()]
        files = residency.mapped_files()
        # A model's figures are its served versions' together.
        for model, pool in pools:
            if pool is None:
                continue
            memory = pool.memory(files)
            if memory.files_bytes is not None:
                resident.add((model, "files"), memory.files_bytes)
            if memory.arena_resident_bytes is not None:
                resident.add((model, "planned_arenas"), memory.arena_resident_bytes)
            planned.add((model,), memory.arena_bytes)
        return [resident, planned]

    def render(self, models_by_state: dict[str, int], memory: list[Gauge] | None = None) -> str:
        """The page; counters as of now, `memory` as measure_memory() gave it (measured here
        when not given)."""
        states = Gauge(
            "etrt_models",
            "Models by state (ready: serving; unavailable: stored, cannot run here)",
            ("state",),
        )
        for state, count in models_by_state.items():
            states.add((state,), count)
        memory = self.measure_memory() if memory is None else memory
        self._ledger.fold()
        with self._lock:
            for front, count in list(self._front_requests.items()):
                self.fronts.samples[(str(front),)] = count
            families = [
                self.requests,
                self.duration,
                self.queue,
                self.inflight,
                self.uploads,
                self.problems,
                states,
                self.batch_size,
                self._queue_depths(),
                self.fronts,
                self.lane,
                self.native,
                self.arenas,
                self.warmups,
                self.digest_checks,
                self.digest_seconds,
                *memory,
            ]
            families += [f for backend in self.backends for f in backend.families()]
            families += [f for source in self.sources for f in source.families()]
            lines = [line for family in families if family is not None for line in family.render()]
        return "\n".join(lines) + "\n"
