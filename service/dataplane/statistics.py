"""Per model and version inference statistics, in the fields of Triton's statistics extension.

Kept beside the Prometheus metrics rather than derived from them: the statistics extension wants
cumulative counts and nanoseconds per phase for one model, which clients (perf_analyzer,
tritonclient's get_inference_statistics) subtract between two reads. Counted as Triton counts
them, because users tune batching by these numbers: each request's outcome and phases
(record_request, by ModelService.infer), and each execute with its batch size (record_execution,
by the scheduler that ran it), so 64 requests merged into 4 executes are 4 executions and 64
inferences. Recording may happen from worker threads, hence the lock.

Requests served at once by the engine's shortest path are counted from the one ledger of them
(service/dataplane/ledger.py), summed per model, version and size, before any read.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from service.dataplane.ledger import ServedGroup, ServedLedger

PHASES = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)
BATCH_PHASES = ("compute_input", "compute_infer", "compute_output")


@dataclass
class _Model:
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    phases: dict = field(default_factory=lambda: {p: [0, 0] for p in PHASES})
    batches: dict = field(default_factory=dict)  # size -> {phase: [count, ns]}

    def add(self, phase: str, ns: int | None, count: int = 1) -> None:
        """`count` events of `ns` nanoseconds in all."""
        if ns is not None:
            slot = self.phases[phase]
            slot[0] += count
            slot[1] += int(ns)


def _duration(slot: list) -> dict:
    return {"count": slot[0], "ns": slot[1]}


class Statistics:
    def __init__(self, ledger: ServedLedger | None = None):
        self._models: dict[tuple[str, str], _Model] = {}
        self._lock = threading.Lock()
        self._ledger = ServedLedger() if ledger is None else ledger
        self._ledger.subscribe(self._count_served)

    def _model(self, name: str, version: str) -> _Model:
        model = self._models.get((name, version))
        if model is None:
            model = self._models[(name, version)] = _Model()
        return model

    def record_request(
        self,
        name: str,
        version: str,
        ok: bool,
        total_ns: int,
        queue_ns: int | None = None,
        input_ns: int | None = None,
        infer_ns: int | None = None,
        output_ns: int | None = None,
    ) -> None:
        """One request's outcome and phase durations (None: the request never reached that
        phase). A request in a batch has the batch's compute time as its own, as in Triton."""
        with self._lock:
            _request(
                self._model(name, version), ok, total_ns, queue_ns, input_ns, infer_ns, output_ns
            )

    def record_execution(
        self, name: str, version: str, size: int, input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        """One successful execute of batch size `size`: building its inputs, running it and
        splitting its outputs took these nanoseconds. Each of its rows is an inference."""
        with self._lock:
            _execution(self._model(name, version), size, input_ns, infer_ns, output_ns)

    def _count_served(self, groups: list[ServedGroup]) -> None:
        """The ledger's requests, each a successful request and, unless a batch's first request
        carried it, an execute: the execute counts only its run, as a scheduler counts one;
        the request all its phases."""
        sums = {}
        for g in groups:
            key = (g.model, g.version, g.rows)
            found = sums.get(key)
            if found is None:
                found = sums[key] = [0, 0, 0, 0, 0, 0, 0, 0, 0]
            found[0] += g.count
            found[1] += g.total_ns
            found[2] += g.input_ns
            found[3] += g.infer_ns
            found[4] += g.output_ns
            found[5] = max(found[5], g.at)
            found[6] += g.queue_ns
            found[7] += g.executes
            found[8] += g.run_ns
        with self._lock:
            for (name, version, size), sum_ in sums.items():
                count, total_ns, input_ns, infer_ns, output_ns, at, queue_ns, executes, run_ns = (
                    sum_
                )
                model = self._model(name, version)
                if executes:
                    _execution(model, size, 0, run_ns, 0, executes)
                _request(model, True, total_ns, queue_ns, input_ns, infer_ns, output_ns, count, at)

    def forget(self, name: str, version: str | None = None) -> None:
        """Drops a model's counts (every version's, or one version's)."""
        self._ledger.fold()
        with self._lock:
            for key in [k for k in self._models if k[0] == name and version in (None, k[1])]:
                del self._models[key]

    def model_stats(self, name: str, version: str) -> dict:
        """Triton's ModelStatistics object (zeros for a model nothing was recorded for)."""
        self._ledger.fold()
        with self._lock:
            model = self._models.get((name, version)) or _Model()
            return {
                "name": name,
                "version": version,
                "last_inference": model.last_inference_ms,
                "inference_count": model.inference_count,
                "execution_count": model.execution_count,
                "inference_stats": {p: _duration(model.phases[p]) for p in PHASES},
                "batch_stats": [
                    {"batch_size": size, **{p: _duration(slots[p]) for p in BATCH_PHASES}}
                    for size, slots in sorted(model.batches.items())
                ],
                "memory_usage": [],
            }


def _request(
    model: _Model, ok, total_ns, queue_ns, input_ns, infer_ns, output_ns, count=1, at=None
) -> None:
    """`count` requests with these nanoseconds in all, the last at `at` (time.time(); None: now)."""
    model.last_inference_ms = max(
        model.last_inference_ms, int((time.time() if at is None else at) * 1000)
    )
    if not ok:
        model.add("fail", total_ns, count)
        return
    model.add("success", total_ns, count)
    model.add("queue", queue_ns, count)
    model.add("compute_input", input_ns, count)
    model.add("compute_infer", infer_ns, count)
    model.add("compute_output", output_ns, count)


def _execution(
    model: _Model, size: int, input_ns: int, infer_ns: int, output_ns: int, count: int = 1
) -> None:
    """`count` executes of batch size `size` with these nanoseconds in all."""
    model.execution_count += count
    model.inference_count += size * count
    phases = model.batches.get(size)
    if phases is None:
        phases = model.batches[size] = {p: [0, 0] for p in BATCH_PHASES}
    for phase, ns in zip(BATCH_PHASES, (input_ns, infer_ns, output_ns)):
        phases[phase][0] += count
        phases[phase][1] += int(ns)
