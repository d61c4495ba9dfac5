"""The image's first build step: the base image's TensorRT against ETRT_TENSORRT_VERSION.

A TensorRT plan deserializes only in the TensorRT release that built it (unless built
version-compatible), so an image on another release would refuse every uploaded plan; this stops
the build before anything is downloaded instead. It runs with the base image's own Python, before
the server is installed, so it stands alone (the standard library only); its module list is the
server's (service.backends.tensorrt.runtime.MODULE_CANDIDATES, which tests/unit/test_image_gate.py
holds it to). Every refusal is one line naming what is missing or different and what to do.

    python3 tensorrt_gate.py WANTED      (an empty WANTED: a CPU image, nothing to check)
"""

from __future__ import annotations

import importlib
import sys

# Full TensorRT first, as the server imports it.
MODULE_CANDIDATES = ("tensorrt", "tensorrt_lean", "tensorrt_lean_bindings")
NGC_IMAGE = "nvcr.io/nvidia/tensorrt:26.07-py3"


def check(wanted: str) -> str | None:
    """None when the base image's TensorRT is release `wanted`, else why not (one line)."""
    for name in MODULE_CANDIDATES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # the module is there but something it needs is not
                return f"the base image's {name} module cannot be imported: {exc}"
            continue
        version = str(getattr(module, "__version__", ""))
        if version == wanted or version.startswith(wanted + "."):
            return None
        return (
            f"this base image has TensorRT {version}, not {wanted}: pick the NGC TensorRT "
            "release that ships the TensorRT your plans were built with (docs/containers-image.md)"
        )
    return (
        f"this base image has no TensorRT Python module ({', '.join(MODULE_CANDIDATES)} not "
        f"found) but ETRT_TENSORRT_VERSION={wanted} asks for TensorRT {wanted}: build on NVIDIA's "
        f"TensorRT image (--build-arg BASE_IMAGE={NGC_IMAGE}), or leave ETRT_TENSORRT_VERSION "
        "empty for a CPU image"
    )


def main(argv: list[str]) -> int:
    wanted = argv[0] if argv else ""
    if not wanted:
        return 0
    problem = check(wanted)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
