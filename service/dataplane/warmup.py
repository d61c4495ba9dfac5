"""Runs a model's warmups (the configuration's model_warmup) on every instance of its forward
method before the model serves, so READY means the first executes' allocations are paid.

The samples were checked against the method at ingest (service.model_config.warmup); what can
still go wrong is the execute itself (a kernel refusing random indices, a delegate failing on
this device), and then the model stays unavailable with that reason instead of failing its
first clients.
"""

from __future__ import annotations

import time

import numpy as np

from service.dataplane.kernel_errors import kernel_reason
from service.dataplane.model_pool import ModelPool
from service.dtypes import BY_DATATYPE, datatype_of_triton
from service.model_config.records import ModelConfig, Warmup, WarmupInput
from service.model_config.warmup import WARMUP_METHOD
from service.tensor_names import tensor_names


class WarmupFailed(Exception):
    """A warmup's execute failed; the message says which warmup and why."""


def _array(given: WarmupInput, shape: list[int], rng: np.random.Generator) -> np.ndarray:
    dtype = BY_DATATYPE[datatype_of_triton(given.data_type)]
    if not given.random:
        return np.zeros(shape, dtype.carrier)
    # Random as Triton's: every bit pattern of the type is as likely (so integers span the whole
    # type), except floating point, drawn from [0, 1) so that no NaN or infinity is sent.
    if dtype.carrier.kind == "f" or dtype.datatype == "BF16":
        values = rng.random(shape, np.float32)
        if dtype.datatype == "BF16":
            return (values.view(np.uint32) >> 16).astype(np.uint16)
        return values.astype(dtype.carrier)
    if dtype.carrier.kind == "b":
        return rng.integers(0, 2, shape).astype(np.bool_)
    raw = rng.bytes(int(np.prod(shape, dtype=np.int64)) * dtype.carrier.itemsize)
    return np.frombuffer(raw, dtype.carrier).reshape(shape).copy()


def warmup_inputs(warmup: Warmup, meta: dict, batched: bool) -> list[np.ndarray]:
    """The warmup's arrays in the method's input order."""
    rng = np.random.default_rng()
    rows = [warmup.batch_size] if batched else []
    return [
        _array(warmup.inputs[name], rows + list(warmup.inputs[name].dims), rng)
        for name in tensor_names(meta["inputs"], "input")
    ]


def run_warmups(pool: ModelPool, config: ModelConfig) -> float | None:
    """Seconds all warmups took (None: the model has none); raises WarmupFailed."""
    if not config.warmups:
        return None
    batched = config.max_batch > 0
    begun = time.perf_counter()
    for warmup in config.warmups:
        arrays = warmup_inputs(warmup, pool.meta(WARMUP_METHOD), batched)
        try:
            pool.warm_up(WARMUP_METHOD, arrays, 1 + warmup.count)
        except Exception as exc:
            raise WarmupFailed(f"warmup {warmup.name!r} failed: {kernel_reason(exc)}") from None
    return time.perf_counter() - begun
