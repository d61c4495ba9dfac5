"""The one place that imports the native host, so backend registration always happens first.

Delegate backends (TensorRT) must be registered with the host before any program that uses them
is opened, in the server and in every load-check child alike; both go through import_host.
"""

from __future__ import annotations

import importlib
import threading

_done: set[str] = set()
_lock = threading.Lock()


def import_host(backend_setup: tuple[str, ...] | list[str] = ()):
    """Returns the `ethost` module after running each "module:function" setup callable once."""
    import ethost

    with _lock:
        for spec in backend_setup:
            if spec in _done:
                continue
            module_name, _, function = spec.partition(":")
            if not function:
                raise ValueError(f"backend setup {spec!r} must be 'module:function'")
            getattr(importlib.import_module(module_name), function)()
            _done.add(spec)
    return ethost
