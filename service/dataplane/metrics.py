"""Counters of what the dataplane did, rendered in Prometheus' text exposition format (0.0.4).

The core updates them and any transport renders them; nothing here knows about HTTP. The format
is small and stable, so it is written here instead of pulling in a client library.

Cardinality stays bounded: model names have passed the ingest name rules, method names come from
stored programs, and a request naming a model or method that does not exist is counted under
UNKNOWN, never under the client's string. Deleting a model removes its series.
"""

from __future__ import annotations

import bisect
import functools
import math
import threading
import weakref
from collections.abc import Callable

from service.dataplane import residency

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# No model name can contain parentheses (ingest rule model.characters), so this never collides.
UNKNOWN = "(unknown)"
DURATION_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def _series(name: str, names: tuple[str, ...], values: tuple[str, ...]) -> str:
    if not names:
        return name
    pairs = ",".join(f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values))
    return f"{name}{{{pairs}}}"


class Family:
    """One metric name: its HELP and TYPE lines and one sample per combination of label values.
    Subclasses name the TYPE in `kind`."""

    def __init__(self, name: str, help_text: str, label_names: tuple[str, ...] = ()):
        self.name = name
        self.help = help_text
        self.label_names = label_names
        self.samples: dict[tuple[str, ...], float] = {}

    def add(self, labels: tuple[str, ...], amount: float = 1.0) -> None:
        self.samples[labels] = self.samples.get(labels, 0.0) + amount

    def remove(self, label: str, value: str) -> None:
        at = self.label_names.index(label)
        self.samples = {k: v for k, v in self.samples.items() if k[at] != value}

    def _lines(self) -> list[str]:
        return [
            f"{_series(self.name, self.label_names, labels)} {format_value(value)}"
            for labels, value in sorted(self.samples.items())
        ]

    def render(self) -> list[str]:
        return [
            f"# HELP {self.name} {_escape_help(self.help)}",
            f"# TYPE {self.name} {self.kind}",
            *self._lines(),
        ]


class Counter(Family):
    kind = "counter"


class Gauge(Family):
    kind = "gauge"


class Histogram(Family):
    """Cumulative buckets, sum and count per label combination, as Prometheus expects them."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        help_text: str,
        label_names: tuple[str, ...],
        buckets: tuple[float, ...] = DURATION_BUCKETS,
    ):
        super().__init__(name, help_text, label_names)
        self.buckets = tuple(sorted(buckets))
        self.samples: dict[tuple[str, ...], list[float]] = {}

    def observe(self, labels: tuple[str, ...], value: float) -> None:
        # Per bucket (non-cumulative), then +Inf, sum and count.
        state = self.samples.setdefault(labels, [0.0] * (len(self.buckets) + 3))
        index = bisect.bisect_left(self.buckets, value)  # the first bound >= value
        state[index] += 1
        state[-2] += value
        state[-1] += 1

    def _lines(self) -> list[str]:
        names = (*self.label_names, "le")
        lines = []
        for labels, state in sorted(self.samples.items()):
            cumulative = 0.0
            for bound, count in zip((*self.buckets, math.inf), state):
                cumulative += count
                bucket = _series(self.name + "_bucket", names, (*labels, format_value(bound)))
                lines.append(f"{bucket} {format_value(cumulative)}")
            lines.append(
                f"{_series(self.name + '_sum', self.label_names, labels)} {format_value(state[-2])}"
            )
            lines.append(
                f"{_series(self.name + '_count', self.label_names, labels)} "
                f"{format_value(state[-1])}"
            )
        return lines


class Metrics:
    """The server's metrics; updated from the event loop and worker threads, hence the lock."""

    def __init__(self, backends: list | None = None):
        """`backends`: the enabled backends' metrics (service.backends.base.BackendMetrics)."""
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
        self.arenas = Gauge(
            "etrt_arena_bytes",
            "Shared memory of each front's arena for request tensors: in_use now, and size",
            ("front", "state"),
        )
        self.backends = [m for m in (backends or []) if m is not None]
        self._live: dict[str, object] = {}
        # (model, method, version) -> the scheduler's current queue depth, read when rendering;
        # the gauge sums a model's versions.
        self._queues: dict[tuple[str, str, str], Callable[[], int]] = {}
        # (model, version) -> its serving pool, whose memory is measured when rendering (weak: a
        # replaced or deleted version's pool must not be kept alive by its metrics).
        self._pools: dict[tuple[str, int], weakref.ref] = {}
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
        with self._lock:
            if self._live.get(model) is not token:  # its series went with the model
                return
            self.inflight.add((model,), -1)
            self.requests.add((model, method, outcome))
            self.duration.observe((model, method), total_s)
            if queued_s is not None:
                self.queue.observe((model, method), queued_s)

    def front_request(self, front: int) -> None:
        with self._lock:
            self.fronts.add((str(front),))

    def arena_usage(self, front: int, in_use: int, size: int) -> None:
        with self._lock:
            self.arenas.samples[(str(front), "in_use")] = in_use
            self.arenas.samples[(str(front), "size")] = size

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
        with self._lock:
            self._live.pop(model, None)
            for family in (
                self.requests,
                self.duration,
                self.queue,
                self.inflight,
                self.batch_size,
            ):
                family.remove("model", model)
            self._queues = {k: v for k, v in self._queues.items() if k[0] != model}
            self._pools = {k: v for k, v in self._pools.items() if k[0] != model}
            self.warmups.remove("model", model)
            for backend in self.backends:
                backend.forget(model)

    def _memory(self) -> list[Gauge]:
        """Measured now, outside the lock (it reads /proc): see service.dataplane.residency."""
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

    def render(self, models_by_state: dict[str, int]) -> str:
        states = Gauge(
            "etrt_models",
            "Models by state (ready: serving; unavailable: stored, cannot run here)",
            ("state",),
        )
        for state, count in models_by_state.items():
            states.add((state,), count)
        memory = self._memory()
        with self._lock:
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
                self.arenas,
                self.warmups,
                *memory,
            ]
            families += [f for backend in self.backends for f in backend.families()]
            lines = [line for family in families if family is not None for line in family.render()]
        return "\n".join(lines) + "\n"
