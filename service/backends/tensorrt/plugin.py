"""The TensorRT backend as the server's registry holds it (service/backends/base.py)."""

from __future__ import annotations

from service.backends.base import Backend
from service.backends.tensorrt import BACKEND_ID
from service.backends.tensorrt.checks import check_tensorrt_delegate
from service.backends.tensorrt.loading import loading
from service.backends.tensorrt.metrics import StagingCounters

BACKEND = Backend(
    name="tensorrt",
    id=BACKEND_ID,
    setup="service.backends.tensorrt.runtime:install_backend",
    device="gpu",
    check=lambda: check_tensorrt_delegate,
    metrics=StagingCounters,
    loading=loading,
    description_fields={
        "engine_source": "'inline', or the .ptd file and engine_key holding the plan",
        "device_id": "the CUDA device the plan was built for",
        "hardware_compatible": "whether the plan runs on other GPU architectures",
        "target_platform": "the platform the plan was built for",
        "aliased_io": "outputs that update an input in place",
        "placement": "where the memory planner put each bound tensor, and the copies it costs",
        "verified": "whether the plan was deserialized at ingest on this host",
        "engine": "what TensorRT reported of the deserialized plan (weights, streamable weights, "
        "context device memory, plan sha-256, bindings)",
        "runnable": "false when stored unverified: the model cannot run on this host",
        "unavailable_reason": "why it cannot run here, when not runnable",
    },
)
