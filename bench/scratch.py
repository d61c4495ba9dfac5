"""A benchmark's scratch folder, removed when the benchmark exits (normally or by an exception):
a run exports programs and keeps artifact stores of tens of MB, and the spin stand-in's records
sit in /dev/shm, which is memory. A run killed by a signal leaves it, as any process would."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path


def scratch_dir(prefix: str, parent: str | None = None) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
