"""The versions of the runtimes that execute programs, for server metadata (/v2).

A program loads only on the ExecuTorch release the native host was built against, and a TensorRT
plan only on the TensorRT release that built it, so a client choosing what to export with needs
both. This is asked on metadata requests, so it never imports TensorRT (loading its libraries
takes a while and may fail): the version is read from the module where the server already
imported it, else from the installed distribution that provides the module TensorRT would be
imported from (service.backends.tensorrt.runtime.MODULE_CANDIDATES, in that order); where
neither tells, TensorRT is left out rather than guessed.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from importlib import metadata

from service.backends.tensorrt.runtime import MODULE_CANDIDATES


def _distribution_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def _installed_tensorrt_version() -> str | None:
    providers = metadata.packages_distributions()
    for module in MODULE_CANDIDATES:
        if importlib.util.find_spec(module) is None:
            continue
        for distribution in providers.get(module, []):
            version = _distribution_version(distribution)
            if version:
                return version
        return None
    return None


def _tensorrt_version() -> str | None:
    for module in MODULE_CANDIDATES:
        version = getattr(sys.modules.get(module), "__version__", None)
        if version:
            return str(version)
    return _installed_tensorrt_version()


def runtime_versions() -> dict[str, str]:
    """{"executorch": ..., "tensorrt": ...}; a runtime that is not installed is left out.

    Never raises: metadata must answer even on a host whose TensorRT install is broken.
    """
    versions = {}
    try:
        executorch = _distribution_version("executorch")
    except Exception:  # a corrupt distribution record must not fail a metadata request
        executorch = None
    if executorch:
        versions["executorch"] = executorch
    try:
        tensorrt = _tensorrt_version()
    except Exception:  # a broken install (module spec, distribution records) likewise
        tensorrt = None
    if tensorrt:
        versions["tensorrt"] = tensorrt
    return versions
