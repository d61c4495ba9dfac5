"""A served model's configuration in the shape of Triton's ModelConfig (the model configuration
extension: GET /v2/models/{m}/config, gRPC ModelConfig).

Triton's tools (perf_analyzer, model_analyzer) read it before anything else: max_batch_size
decides whether they strip a batch dimension from the metadata shapes, `dynamic_batching` marks a
batching scheduler, and every input and output named here must be one the metadata lists. So the
tensors are the "forward" method's (the one model metadata publishes), named as /infer accepts
them, and `dims` leave out the batch dimension when max_batch_size > 0, as Triton's do.

The answer is plain JSON values under model_config.proto's field names, so the REST route can
send it as it is and the gRPC servicer can parse it into its ModelConfig message.
"""

from __future__ import annotations

from service import oip
from service.dataplane.signature import signature_of
from service.dataplane.types import TensorSpec
from service.dtypes import triton_type
from service.model_config import version_policy
from service.model_config.records import DynamicBatching, QueuePolicy
from service.store.records import ModelDescription


def _dims(spec: TensorSpec, batched: bool) -> list[int]:
    shape = spec.published_shape
    return shape[1:] if batched else shape


def _input(spec: TensorSpec, batched: bool) -> dict:
    return {
        "name": spec.name,
        "data_type": triton_type(spec.datatype),
        "format": "FORMAT_NONE",
        "dims": _dims(spec, batched),
        "is_shape_tensor": False,
        "allow_ragged_batch": False,
        "optional": False,
    }


def _output(spec: TensorSpec, batched: bool) -> dict:
    return {
        "name": spec.name,
        "data_type": triton_type(spec.datatype),
        "dims": _dims(spec, batched),
        "label_filename": "",
        "is_shape_tensor": False,
    }


def _queue_policy(policy: QueuePolicy) -> dict:
    return {
        "timeout_action": policy.timeout_action,
        "default_timeout_microseconds": policy.default_timeout_microseconds,
        "allow_timeout_override": True,
        "max_queue_size": policy.max_queue_size,
    }


def _dynamic_batching(batching: DynamicBatching) -> dict:
    return {
        "preferred_batch_size": list(batching.preferred_batch_size),
        "max_queue_delay_microseconds": batching.max_queue_delay_microseconds,
        "preserve_ordering": False,
        "priority_levels": batching.priority_levels,
        "default_priority_level": batching.default_priority_level,
        "default_queue_policy": _queue_policy(batching.default_queue_policy),
        "priority_queue_policy": {
            str(level): _queue_policy(policy)
            for level, policy in sorted(batching.priority_queue_policy.items())
        },
    }


def _kind(description: ModelDescription, gpu_backends: frozenset[str]) -> str:
    backends = {
        delegate.get("backend") if isinstance(delegate, dict) else delegate
        for method in description.methods
        for delegate in method.get("delegates", [])
    }
    return "KIND_GPU" if backends & gpu_backends else "KIND_CPU"


def model_config(
    description: ModelDescription, instances: int, gpu_backends: frozenset[str]
) -> dict:
    """The ModelConfig of a stored model; `instances` per method, `gpu_backends` the delegate
    ids that run on the GPU (their models' instance groups are KIND_GPU)."""
    config = description.effective_config
    max_batch = config.max_batch
    forward = next((m for m in description.methods if m["name"] == oip.DEFAULT_METHOD), None)
    signature = signature_of(forward) if forward is not None else None
    answer = {
        "name": description.name,
        "platform": oip.PLATFORM,
        "backend": oip.PLATFORM,
        "version_policy": config.version_policy or version_policy.DEFAULT,
        "max_batch_size": max_batch,
        "input": [_input(s, max_batch > 0) for s in signature.inputs] if signature else [],
        "output": [_output(s, max_batch > 0) for s in signature.outputs] if signature else [],
        "instance_group": [
            {
                "name": f"{description.name}_0",
                "kind": _kind(description, gpu_backends),
                "count": instances,
                "gpus": [],
                "profile": [],
                "passive": False,
                "host_policy": "",
            }
        ],
        "parameters": config.tensorrt.to_json(),
        "model_warmup": [warmup.to_json() for warmup in config.warmups],
    }
    if config.dynamic_batching is not None:
        answer["dynamic_batching"] = _dynamic_batching(config.dynamic_batching)
    return answer
