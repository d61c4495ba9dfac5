"""Loads the TensorRTBackend library the way the service does: through the native host first
(dlopen RTLD_GLOBAL into the process-wide backend registry), then imported for configuration."""

import importlib.util

import ethost


def load_tensorrt_backend():
    """The ethost_tensorrt module, once the host's registry holds its backend."""
    ethost.load_backend_library(importlib.util.find_spec("ethost_tensorrt").origin)
    import ethost_tensorrt

    error = ethost_tensorrt.registration_error()
    if error is not None:
        raise RuntimeError(error)
    assert "TensorRTBackend" in ethost.registered_backends()
    ethost.accept_device_memory("TensorRTBackend")  # as install_backend does
    return ethost_tensorrt


def new_delegate_counters(trt, before_labels):
    """Staging counters of the delegate instances created since `before_labels` was taken."""
    return [d for d in trt.staging_counters() if d["delegate"] not in before_labels]


def labels(trt):
    return {d["delegate"] for d in trt.staging_counters()}
