"""TensorRT's metrics: staging copies per model, method and delegate, and each model's device
memory (engine weights and execution contexts) with its engines' knobs for its description.

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
from service.prometheus import Counter, Gauge


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

    def _reports(self, model: str) -> list[dict]:
        trt = sys.modules.get("ethost_tensorrt")
        with self._lock:
            found = self._models.get(model)
        if trt is None or found is None:
            return []
        return [r for r in trt.engine_reports() if r["owner"] == found[0]]

    def describe(self, model: str) -> dict:
        """The model's device memory and its delegates' engines, for its description: weights
        once per engine (an engine shared with other models counts in each, marked by
        engine_holders), contexts once per delegate instance."""
        reports = self._reports(model)
        if not reports:
            return {}
        weights = {r["engine_id"]: r["resident_weights_size"] for r in reports}
        # A context on the shared scratch holds none of its own (the scratch has its gauge).
        contexts = sum(r["device_memory_size"] for r in reports if not r["shared_scratch"])
        engines = [
            {
                "method": r["method"],
                "ordinal": r["ordinal"],
                "engine_id": r["engine_id"],
                "shared_engines": r["shared_engines"],
                "shared_scratch": r["shared_scratch"],
                "engine_holders": r["engine_holders"],
                "resident_weights_bytes": r["resident_weights_size"],
                "streamable_weights_bytes": r["streamable_weights_size"],
                "weight_streaming_budget": r["weight_streaming_budget"],
                "context_bytes": r["device_memory_size"],
                "cuda_graphs": r["cuda_graphs"],
            }
            for r in reports
        ]
        return {
            "device_memory": {
                "device_bytes": sum(weights.values()) + contexts,
                "weights_bytes": sum(weights.values()),
                "contexts_bytes": contexts,
                "engines": engines,
            }
        }

    def families(self) -> list:
        if "ethost_tensorrt" not in sys.modules:
            return []
        device = Gauge(
            "etrt_model_tensorrt_device_bytes",
            "GPU memory a model's TensorRT delegates hold: engine weights (memory=weights, an "
            "engine shared by several models counts in each) and execution contexts "
            "(memory=contexts)",
            ("model", "memory"),
        )
        scratch = Gauge(
            "etrt_tensorrt_shared_scratch_bytes",
            "The shared activation scratch TensorRT contexts take their memory from "
            "(--tensorrt-shared-scratch), on the active GPU",
            (),
        )
        scratch.add((), sys.modules["ethost_tensorrt"].shared_scratch_bytes())
        with self._lock:
            models = list(self._models)
        for model in models:
            view = self.describe(model).get("device_memory")
            if view:
                device.add((model, "weights"), view["weights_bytes"])
                device.add((model, "contexts"), view["contexts_bytes"])
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
        return [copies, device, scratch]
