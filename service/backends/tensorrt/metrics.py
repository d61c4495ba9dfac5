"""TensorRT's metrics: staging copies per model, method and delegate.

ethost_tensorrt counts copies per live delegate instance but labels an instance only by its
method and a process-wide number (it does not know the model), so the instances are attributed
to models here, by which instances opening a model's pool created. Once the native module labels
instances with model and method when they are created, this attribution can go.
"""
from __future__ import annotations

import sys
import threading
from typing import Callable

from service.backends.tensorrt import BACKEND_ID
from service.dataplane.metrics import Counter


class StagingCounters:
    """Names each live TensorRT delegate instance by the model, method and delegate it runs.

    ethost_tensorrt labels a delegate instance "<method>#<n>", n counting every instance the
    process ever initialized, so the label alone neither names the model nor stays stable across
    a reload. Instances are created while a model's pool opens: one method instance after the
    other, each initializing its delegates in program order. Opening pools one at a time and
    diffing the labels before and after therefore tells which instance is which delegate of
    which model; the counters of a model's instances of one delegate are then summed.
    """

    def __init__(self):
        self._open_lock = threading.Lock()
        self._lock = threading.Lock()
        # model -> delegate instance label -> (method, delegate index)
        self._owners: dict[str, dict[str, tuple[str, str]]] = {}

    @staticmethod
    def _counters() -> list[dict]:
        trt = sys.modules.get("ethost_tensorrt")
        return trt.staging_counters() if trt is not None else []

    def open(self, model: str, open_pool: Callable):
        """Opens the pool and remembers which delegate instances it created for `model`."""
        with self._open_lock:
            before = {d["delegate"] for d in self._counters()}
            pool = open_pool()
            delegates = {method: pool.meta(method)["delegates"] for method in pool.method_names}
            created = sorted((d["delegate"] for d in self._counters()
                              if d["delegate"] not in before),
                             key=lambda label: int(label.rpartition("#")[2]))
        owners = {}
        for method, backends in delegates.items():
            positions = [i for i, backend in enumerate(backends) if backend == BACKEND_ID]
            mine = [label for label in created if label.rpartition("#")[0] == method]
            for order, label in enumerate(mine if positions else []):
                owners[label] = (method, str(positions[order % len(positions)]))
        with self._lock:
            self._owners[model] = owners
        return pool

    def forget(self, model: str) -> None:
        with self._lock:
            self._owners.pop(model, None)

    def families(self) -> list[Counter]:
        if "ethost_tensorrt" not in sys.modules:
            return []
        copies = Counter(
            "etrt_tensorrt_staging_copies_total",
            "Copies through an aligned staging buffer made by TensorRT delegates, summed over a "
            "model's instances of the delegate (delegate = its index among the method's "
            "delegates); resets when the model is replaced",
            ("model", "method", "delegate", "binding"))
        with self._lock:
            by_label = {label: (model, *owner) for model, owners in self._owners.items()
                        for label, owner in owners.items()}
        for entry in self._counters():
            owner = by_label.get(entry["delegate"])
            if owner is None:  # an instance of a pool being replaced or closed
                continue
            for binding in entry["bindings"]:
                copies.add((*owner, binding["name"]), binding["staging_copies"])
        return [copies]
