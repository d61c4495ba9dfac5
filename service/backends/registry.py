"""The backends this server knows, by the names `--backends` takes."""

from __future__ import annotations

from service.backends.base import Backend
from service.backends.tensorrt import BACKEND as TENSORRT
from service.backends.xnnpack import BACKEND as XNNPACK

KNOWN: dict[str, Backend] = {b.name: b for b in (TENSORRT, XNNPACK)}


def enabled(names: tuple[str, ...]) -> list[Backend]:
    unknown = [n for n in names if n not in KNOWN]
    if unknown:
        raise ValueError(f"unknown backend(s) {', '.join(unknown)}; known: {', '.join(KNOWN)}")
    return [KNOWN[n] for n in names]
