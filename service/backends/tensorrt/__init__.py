"""TensorRT: engines built by Torch-TensorRT, run by the native `ethost_tensorrt` delegate."""

from __future__ import annotations

from service.backends.base import Backend

# The delegate id Torch-TensorRT writes into programs and ethost_tensorrt registers; the one
# place the server spells it.
BACKEND_ID = "TensorRTBackend"


def _check():
    from service.backends.tensorrt.checks import check_tensorrt_delegate

    return check_tensorrt_delegate


def _metrics():
    from service.backends.tensorrt.metrics import StagingCounters

    return StagingCounters()


BACKEND = Backend(
    name="tensorrt",
    id=BACKEND_ID,
    setup="service.backends.tensorrt.runtime:install_backend",
    device="gpu",
    check=_check,
    metrics=_metrics,
    description_fields={
        "engine_source": "'inline', or the .ptd file and engine_key holding the plan",
        "device_id": "the CUDA device the plan was built for",
        "hardware_compatible": "whether the plan runs on other GPU architectures",
        "target_platform": "the platform the plan was built for",
        "aliased_io": "outputs that update an input in place",
        "placement": "where the memory planner put each bound tensor, and the copies it costs",
        "verified": "whether the plan was deserialized at ingest on this host",
        "engine": "what TensorRT reported of the deserialized plan (weights, bindings)",
        "runnable": "false when stored unverified: the model cannot run on this host",
        "unavailable_reason": "why it cannot run here, when not runnable",
    },
)
