"""What happens on the load thread before and while a model's TensorRT delegates are created.

Admission: a model's device needs are known before anything of it loads, from what ingest
recorded of each engine (TensorRT's figures for the deserialized plan) and the model's knobs:

- weights: each engine's resident weights (all of them, or with a weight-streaming budget the
  non-streamable part plus the budget), once per engine -- and not at all for an engine another
  loaded model already shares (same plan bytes, device and budget, use_shared_engines on);
- contexts: each engine's device memory size (TensorRT's activation memory) once per method
  instance, since every instance has its own execution context; with the server's shared
  activation scratch (--tensorrt-shared-scratch), only what the scratch must grow by;
- planned: the method instances' device-planned buffers.

A model that needs more than the device has free (cudaMemGetInfo, through the delegate's device
memory; the host stand-in in tests) is refused with both figures, rather than loading until an
allocation fails halfway or, worse, an execute runs out of memory while serving.

Then the knobs (service.model_config.parameters) are set for the delegates this thread creates,
where they override what the program baked in.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from service import rules
from service.backends.tensorrt import BACKEND_ID
from service.errors import DeviceMemoryFull, Problem, clip
from service.model_config.parameters import TensorRTParameters


@dataclass(frozen=True)
class DeviceNeed:
    weights: int
    contexts: int
    planned: int

    @property
    def total(self) -> int:
        return self.weights + self.contexts + self.planned


def _budget_key(params: TensorRTParameters) -> str:
    if params.budget_bytes is not None:
        return f"bytes:{params.budget_bytes}"
    if params.budget_fraction is not None:
        return f"fraction:{params.budget_fraction:.6f}"  # as C++ std::to_string writes it
    return ""


def resident_weights(engine: dict, params: TensorRTParameters) -> int:
    """Bytes of an engine's weights on the device under the model's budget."""
    total = max(int(engine.get("weight_bytes") or 0), 0)
    streamable = int(engine.get("streamable_weights_size") or 0)
    if streamable <= 0 or (params.budget_bytes is None and params.budget_fraction is None):
        return total
    if params.budget_bytes is not None:
        budget = min(params.budget_bytes, streamable)
    else:
        budget = int(params.budget_fraction * streamable)
    return total - streamable + budget


def device_need(
    methods: tuple[dict, ...],
    instances: int,
    params: TensorRTParameters,
    loaded: set[tuple],
    scratch: int | None = None,
) -> DeviceNeed:
    """`loaded`: (plan digest, budget key) of the engines live in this process; `scratch`: the
    shared activation scratch's bytes now, None when contexts hold their own memory."""
    weights = contexts = planned = largest = 0
    seen: set[tuple] = set()
    for method in methods:
        for delegate in method.get("delegates", []):
            engine = (delegate.get("details") or {}).get("engine")
            if delegate.get("backend") != BACKEND_ID or not engine:
                continue
            context = max(int(engine.get("device_memory_size") or 0), 0)
            contexts += context * instances
            largest = max(largest, context)
            identity = (engine.get("plan_sha256"), _budget_key(params))
            if params.shared_engines and identity[0] is not None:
                if identity in seen or identity in loaded:
                    continue
                seen.add(identity)
            weights += resident_weights(engine, params)
        planned += instances * sum(
            int(b["size"]) for b in method.get("planned_buffers", []) if b.get("device") != "cpu"
        )
    if scratch is not None:
        contexts = max(largest - scratch, 0)
    return DeviceNeed(weights, contexts, planned)


def _loaded_engines(trt) -> set[tuple]:
    return {
        (report["plan_sha256"], report["budget_key"])
        for report in trt.engine_reports()
        if report["shared_engines"] and report["plan_sha256"]
    }


def admit(
    name: str,
    methods: tuple[dict, ...],
    instances: int,
    params: TensorRTParameters,
    shared_scratch: bool = False,
):
    """Raises DeviceMemoryFull when the model would not fit in the device's free memory now."""
    trt = sys.modules.get("ethost_tensorrt")
    if trt is None:
        return
    scratch = trt.shared_scratch_bytes() if shared_scratch else None
    need = device_need(methods, instances, params, _loaded_engines(trt), scratch)
    if need.total == 0:
        return
    info = trt.device_memory_info()
    if info is None:  # no device size known here: nothing to admit against
        return
    free, total = info
    if need.total > free:
        message = (
            f"model {clip(name)!r} needs {need.total} bytes of GPU memory ({need.weights} of "
            f"engine weights, {need.contexts} of execution contexts for {instances} instance(s), "
            f"{need.planned} of device-planned buffers) but {free} of the device's {total} bytes "
            "are free; unload a model, lower instance_group, or set a weight_streaming_budget"
        )
        raise DeviceMemoryFull(message, [Problem(None, rules.LOAD_DEVICE_MEMORY, message)])


@contextmanager
def loading(description, instances: int, settings) -> Iterator[None]:
    """Admits the model, then passes its knobs (and the server's shared-scratch setting) to the
    delegates this thread creates."""
    config = description.effective_config
    shared = settings.tensorrt_shared_scratch
    admit(description.name, description.methods, instances, config.tensorrt, shared)
    trt = sys.modules.get("ethost_tensorrt")
    if trt is None:
        yield
        return
    trt.set_load_options(
        **config.tensorrt.load_options(), use_shared_activation_scratch=shared or None
    )
    try:
        yield
    finally:
        trt.set_load_options()
