"""Torch-TensorRT's own blob serializer, read from its wheel at test time.

`torch_tensorrt/executorch/serialization.py` is pure Python (json, struct, dataclasses), but the
package around it needs CUDA and TensorRT, so the module is loaded by itself from the wheel file,
never installed and never copied into this repository. The wheel is fetched once with pip from
the registry into build/ (ignored by git); ETRT_TORCH_TENSORRT_WHEEL names a wheel to use instead.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

VERSION = "2.14.0"
MEMBER = "torch_tensorrt/executorch/serialization.py"
CACHE = Path(__file__).resolve().parents[2] / "build" / "torch-tensorrt-wheel"


def wheel() -> Path:
    given = os.environ.get("ETRT_TORCH_TENSORRT_WHEEL")
    if given:
        return Path(given)
    found = sorted(CACHE.glob(f"torch_tensorrt-{VERSION}-*.whl"))
    if not found:
        CACHE.mkdir(parents=True, exist_ok=True)
        # The wheel of this machine's platform: the module inside is the same in every one.
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet"]
            + ["--dest", str(CACHE), f"torch-tensorrt=={VERSION}"],
            check=True,
            timeout=600,
        )
        found = sorted(CACHE.glob(f"torch_tensorrt-{VERSION}-*.whl"))
    return found[0]


def load() -> ModuleType:
    """The serializer module (serialize_engine, TensorRTBlobMetadata, TensorRTIOBinding)."""
    with zipfile.ZipFile(wheel()) as archive:
        source = archive.read(MEMBER).decode()
    spec = importlib.util.spec_from_loader("torch_tensorrt_serialization", loader=None)
    module = importlib.util.module_from_spec(spec)
    # Registered while it runs: its dataclasses look their module up by name.
    sys.modules[spec.name] = module
    try:
        exec(compile(source, f"{wheel().name}/{MEMBER}", "exec"), module.__dict__)
    finally:
        del sys.modules[spec.name]
    return module
