"""The one place that imports the native host, so backend registration always happens first.

Delegate backends (TensorRT) must be registered with the host before any program that uses them
is opened, in the server and in every load-check child alike; both go through import_host.
"""

from __future__ import annotations

import importlib
import threading

_applied: tuple[str, ...] = ()
_lock = threading.Lock()


def import_host(backend_setup: tuple[str, ...] | list[str] = ()):
    """Returns the `ethost` module with `backend_setup` ("module:function" callables) applied.

    A server applies one list once. A process that hosts several engines one after another (the
    embedded Engine, tests) may ask for different lists: a setup replaces what an earlier one
    registered (the engine provider is process-wide), so a list is applied again, whole and in
    order, whenever it differs from the one applied last; an empty list changes nothing."""
    import ethost

    global _applied
    specs = tuple(backend_setup)
    with _lock:
        if specs and specs != _applied:
            for spec in specs:
                module_name, _, function = spec.partition(":")
                if not function:
                    raise ValueError(f"backend setup {spec!r} must be 'module:function'")
                getattr(importlib.import_module(module_name), function)()
            _applied = specs
    return ethost
