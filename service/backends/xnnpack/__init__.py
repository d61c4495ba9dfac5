"""XNNPACK: ExecuTorch's CPU delegate, from the executorch wheel's own backend library.

The wheel ships it as lib/libexecutorch_backend_xnnpack.so, linked against the same
libexecutorch.so the native host uses, so loading it registers XnnpackBackend with the host's
registry. Its delegates need no check of their own beyond the check child loading every method:
XNNPACK validates its subgraphs when the method initializes them.
"""

from __future__ import annotations

from pathlib import Path

from service.backends.base import Backend

BACKEND_ID = "XnnpackBackend"
LIBRARY = "libexecutorch_backend_xnnpack.so"


def library_path() -> Path:
    import executorch

    for folder in executorch.__path__:
        candidate = Path(folder) / "lib" / LIBRARY
        if candidate.exists():
            return candidate
    raise RuntimeError(f"the executorch wheel has no {LIBRARY} (XNNPACK backend)")


def install_backend() -> None:
    """Backend setup: registers XnnpackBackend with the native host (idempotent: the library
    registers once per process, whoever loads it)."""
    import ethost

    if BACKEND_ID in ethost.registered_backends():
        return
    added = ethost.load_backend_library(str(library_path()))
    if BACKEND_ID not in added:
        raise RuntimeError(f"{LIBRARY} did not register {BACKEND_ID} (registered: {added})")


BACKEND = Backend(name="xnnpack", id=BACKEND_ID, setup="service.backends.xnnpack:install_backend")
