"""Server and model metadata as the protocol publishes them.

A model's top-level `inputs`/`outputs` are its "forward" method's, since that is what standard
clients run; programs often have more methods, so every method's signature is also listed under
`methods` (an addition to the protocol that clients ignore), and the request parameter `method`
runs one of them.
"""

from __future__ import annotations

import importlib.metadata

from service import oip
from service.backends.versions import runtime_versions
from service.dataplane.service import ModelService
from service.dataplane.types import MethodSignature, TensorSpec


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def server_metadata() -> dict:
    """Also names the runtimes (executorch_version, tensorrt_version where installed): a client
    choosing what to export with needs both."""
    body = {
        "name": oip.SERVER_NAME,
        "version": _version(oip.SERVER_NAME) or "unknown",
        "extensions": list(oip.REST_EXTENSIONS),
    }
    body.update({f"{runtime}_version": version for runtime, version in runtime_versions().items()})
    return body


def _tensor(spec: TensorSpec) -> dict:
    return {
        "name": spec.name,
        "datatype": spec.datatype or "UNSUPPORTED",
        "shape": spec.published_shape,
    }


def _method(signature: MethodSignature) -> dict:
    return {
        "inputs": [_tensor(s) for s in signature.inputs],
        "outputs": [_tensor(s) for s in signature.outputs],
    }


async def model_metadata(service: ModelService, name: str, version: str | None) -> dict:
    signatures = await service.signatures(name, version)
    forward = signatures.get(oip.DEFAULT_METHOD)
    return {
        "name": name,
        "versions": await service.served_versions(name),
        "platform": oip.PLATFORM,
        **(_method(forward) if forward else {"inputs": [], "outputs": []}),
        "methods": {method: _method(sig) for method, sig in signatures.items()},
    }
