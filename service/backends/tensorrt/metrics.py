"""TensorRT's metrics: staging copies per model, method and delegate.

ethost_tensorrt counts copies per live delegate instance and names each instance when it is
created: the owner its creating thread set (set_instance_owner), its method, and its ordinal among
the TensorRT delegates of its method instance. The owner is set to a token of the model's pool
while the pool's instances load, so every instance is attributed to exactly one live pool.
"""

from __future__ import annotations

import itertools
import sys
import threading
from collections.abc import Callable

from service.backends.tensorrt import BACKEND_ID
from service.prometheus import Counter


class StagingCounters:
    def __init__(self):
        self._lock = threading.Lock()
        self._serial = itertools.count()
        # model -> (owner token of its live pool, method -> positions of its TensorRT delegates
        # among all of the method's delegates, in program order)
        self._models: dict[str, tuple[str, dict[str, list[int]]]] = {}

    def open(self, model: str, open_pool: Callable):
        """Opens the pool with its delegate instances named after a fresh token for `model`."""
        trt = sys.modules.get("ethost_tensorrt")
        if trt is None:
            return open_pool()
        owner = f"pool-{next(self._serial)}"
        trt.set_instance_owner(owner)
        try:
            pool = open_pool()
        finally:
            trt.set_instance_owner("")
        positions = {
            method: [
                i
                for i, backend in enumerate(pool.meta(method)["delegates"])
                if backend == BACKEND_ID
            ]
            for method in pool.method_names
        }
        with self._lock:
            self._models[model] = (owner, positions)
        return pool

    def forget(self, model: str) -> None:
        with self._lock:
            self._models.pop(model, None)

    def families(self) -> list[Counter]:
        if "ethost_tensorrt" not in sys.modules:
            return []
        copies = Counter(
            "etrt_tensorrt_staging_copies_total",
            "Copies through an aligned staging buffer made by TensorRT delegates, summed over a "
            "model's instances of the delegate (delegate = its index among the method's "
            "delegates); resets when the model is replaced",
            ("model", "method", "delegate", "binding"),
        )
        with self._lock:
            by_owner = {
                owner: (model, positions) for model, (owner, positions) in self._models.items()
            }
        for entry in sys.modules["ethost_tensorrt"].staging_counters():
            found = by_owner.get(entry["owner"])
            if found is None:  # an instance of a pool being replaced or closed
                continue
            model, positions = found
            places = positions.get(entry["method"], [])
            ordinal = entry["ordinal"]
            delegate = str(places[ordinal] if ordinal < len(places) else ordinal)
            for binding in entry["bindings"]:
                copies.add(
                    (model, entry["method"], delegate, binding["name"]), binding["staging_copies"]
                )
        return [copies]
