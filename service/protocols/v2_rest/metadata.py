"""Server and model metadata as the protocol publishes them.

A model's top-level `inputs`/`outputs` are its "forward" method's, since that is what standard
clients run; programs often have more methods, so every method's signature is also listed under
`methods` (an addition to the protocol that clients ignore), and the request parameter `method`
runs one of them.
"""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import sys

from service.dataplane.service import MODEL_VERSION, ModelService
from service.dataplane.types import MethodSignature, TensorSpec

SERVER_NAME = "etrt-server"
EXTENSIONS = ["binary_tensor_data", "model_repository", "statistics"]
PLATFORM = "executorch"
DEFAULT_METHOD = "forward"
# Import names of TensorRT's Python runtime, as the provider tries them.
_TENSORRT_MODULES = ("tensorrt", "tensorrt_lean", "tensorrt_lean_bindings")


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def _installed_tensorrt() -> str | None:
    """TensorRT's version from the installed packages' metadata, without importing it (importing
    TensorRT loads hundreds of MB of libraries)."""
    for name in _TENSORRT_MODULES:
        try:
            if importlib.util.find_spec(name) is None:
                continue
        except (ImportError, ValueError):
            continue
        for distribution in importlib.metadata.packages_distributions().get(name, []):
            version = _version(distribution)
            if version:
                return version
    return None


def tensorrt_version() -> str | None:
    """The loaded runtime's version where the provider has imported it, else the installed one;
    None where there is none. Never raises: metadata must answer on any host."""
    try:
        for name in _TENSORRT_MODULES:
            module = sys.modules.get(name)
            if module is not None and getattr(module, "__version__", None):
                return str(module.__version__)
        return _installed_tensorrt()
    except Exception:  # a broken installation must not break GET /v2
        return None


def server_metadata() -> dict:
    body = {"name": SERVER_NAME, "version": _version(SERVER_NAME) or "unknown",
            "extensions": EXTENSIONS, "executorch_version": _version("executorch")}
    trt = tensorrt_version()
    if trt is not None:
        body["tensorrt_version"] = trt
    return body


def _tensor(spec: TensorSpec) -> dict:
    return {"name": spec.name, "datatype": spec.datatype or "UNSUPPORTED",
            "shape": spec.published_shape}


def _method(signature: MethodSignature) -> dict:
    return {"inputs": [_tensor(s) for s in signature.inputs],
            "outputs": [_tensor(s) for s in signature.outputs]}


def model_metadata(service: ModelService, name: str, version: str | None) -> dict:
    signatures = service.signatures(name, version)
    forward = signatures.get(DEFAULT_METHOD)
    return {"name": name, "versions": [MODEL_VERSION], "platform": PLATFORM,
            **(_method(forward) if forward else {"inputs": [], "outputs": []}),
            "methods": {method: _method(sig) for method, sig in signatures.items()}}
