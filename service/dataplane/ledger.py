"""The one record of the requests the engine served at once (ModelService.infer_now, and its
native lane: runtime_ext/lane/), which every view that counts them reads: the statistics
extension and /metrics.

Those requests are the engine's most frequent event, and its one thread's time per request
bounds the server: each is one append to a deque, one tuple for all views, with no lock. The
views fold the backlog in before any read of theirs, so every read sees every request recorded
before it, and the ledger folds it every FOLD_AT requests, so it stays small. Views count
groups of requests served alike (ServedGroup): the lane hands its requests over already summed,
since one Python tuple per request saturated the engine's thread at ~340k lane requests a
second (bench/bench_workers.py, 8 fronts).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

# Served requests kept unfolded at most (a few hundred KB).
FOLD_AT = 4096
# The same for the engine's native lane: a fold holds the GIL, and an execute that launches
# through Python (a TensorRT engine enqueued through its Python API, the spin stand-in) waits for
# it. Folded one tuple per request (~1 us each), 4096 requests (3 ms) outlasted the work queued
# on a GPU and left it idle, 512 did not (bench/bench_gpu_busy.py); summed per group
# (ServedGroup), the hold is shorter still.
LANE_FOLD_AT = 512


class Served(NamedTuple):
    """A request that succeeded: an execute of its own, unqueued, or one of a batch the engine's
    native lane merged (runtime_ext/lane/batcher.h), whose first request carries the execute."""

    model: str
    version: str
    method: str
    rows: int  # the execute's batch size
    total_ns: int
    input_ns: int
    infer_ns: int
    output_ns: int
    at: float  # time.time() when it was answered
    # The front it came through, where the engine's native lane served it (metrics count its
    # fronts' requests from these); -1 where the engine's loop counted the front already.
    front: int = -1
    queue_ns: int = 0  # waiting for a batch
    executes: int = 1  # 0 for a batch's requests after its first


class ServedGroup(NamedTuple):
    """Requests of one method of one model version, of one batch size, through one front (-1:
    counted by the engine's loop), summed; `totals_s` and `queued_s` hold each one's total and
    each nonzero queue wait, float64 seconds, for the histograms."""

    model: str
    version: str
    method: str
    rows: int
    front: int
    count: int
    executes: int
    total_ns: int
    input_ns: int
    infer_ns: int
    output_ns: int
    run_ns: int  # infer_ns of the requests that carried an execute
    queue_ns: int
    at: float  # the latest answer's time.time()
    totals_s: np.ndarray
    queued_s: np.ndarray


def grouped(events: list[Served]) -> list[ServedGroup]:
    """The ledger's own requests as the lane hands over its own (runtime_ext/lane/lane_module.cpp:
    served)."""
    sums: dict[tuple, list] = {}
    for e in events:
        found = sums.get((e.model, e.version, e.method, e.rows, e.front))
        if found is None:
            found = sums[(e.model, e.version, e.method, e.rows, e.front)] = [0] * 9 + [[], []]
        found[0] += 1
        found[1] += e.executes
        found[2] += e.total_ns
        found[3] += e.input_ns
        found[4] += e.infer_ns
        found[5] += e.output_ns
        found[6] += e.infer_ns if e.executes else 0
        found[7] += e.queue_ns
        found[8] = max(found[8], e.at)
        found[9].append(e.total_ns / 1e9)
        if e.queue_ns:
            found[10].append(e.queue_ns / 1e9)
    return [
        ServedGroup(*key, *found[:9], np.array(found[9]), np.array(found[10], dtype=np.float64))
        for key, found in sums.items()
    ]


class ServedLedger:
    def __init__(self):
        self._events: deque[Served] = deque()
        self._lock = threading.Lock()
        self._views: list[Callable[[list[ServedGroup]], None]] = []
        # Where else served requests are recorded: each returns its groups and forgets them
        # (the engine's native lane, service/engine/server.py).
        self._sources: list[Callable[[], list[ServedGroup]]] = []

    def __len__(self) -> int:
        return len(self._events)

    def subscribe(self, count: Callable[[list[ServedGroup]], None]) -> None:
        """`count(events)` folds events into a view; it takes the view's own lock, so a view
        calls fold() before taking that lock, never while holding it."""
        self._views.append(count)

    def add(self, model, version, method, rows, total_ns, input_ns, infer_ns, output_ns) -> None:
        events = self._events
        events.append(
            Served(
                model, version, method, rows, total_ns, input_ns, infer_ns, output_ns, time.time()
            )
        )
        if len(events) >= FOLD_AT:
            self.fold()

    def add_source(self, drain: Callable[[], list[ServedGroup]]) -> None:
        self._sources.append(drain)

    def fold(self) -> None:
        """Counts what was recorded so far, here and at every source, into every view."""
        with self._lock:
            events = self._events
            drained = grouped([events.popleft() for _ in range(len(events))])
            for drain in self._sources:
                drained += drain()
            if drained:
                for count in self._views:
                    count(drained)
