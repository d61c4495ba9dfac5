"""The backends this server knows, by the names `--backends` takes, and what the others are
given of the enabled ones (ingest their checks and setups, the dataplane their metrics)."""

from __future__ import annotations

from service.backends.base import Backend
from service.backends.tensorrt.plugin import BACKEND as TENSORRT
from service.backends.xnnpack import BACKEND as XNNPACK
from service.config import Settings
from service.ingest.delegates import IngestBackends

KNOWN: dict[str, Backend] = {b.name: b for b in (TENSORRT, XNNPACK)}


def enabled(names: tuple[str, ...]) -> list[Backend]:
    unknown = [n for n in names if n not in KNOWN]
    if unknown:
        raise ValueError(f"unknown backend(s) {', '.join(unknown)}; known: {', '.join(KNOWN)}")
    return [KNOWN[n] for n in names]


def setups(settings: Settings) -> tuple[str, ...]:
    """The "module:function" callables that register the backends, in order."""
    if settings.backend_setup is not None:
        return settings.backend_setup
    return tuple(backend.setup for backend in enabled(settings.backends))


def ingest_backends(settings: Settings, extra_checks: dict | None = None) -> IngestBackends:
    """The enabled backends' delegate checks by backend id, and their setups, for run_ingest.
    `extra_checks` (backend id -> check) add to or replace them (tests' stand-ins)."""
    checks = {backend.id: backend.check() for backend in enabled(settings.backends)}
    checks.update(extra_checks or {})
    return IngestBackends(
        {backend_id: check for backend_id, check in checks.items() if check is not None},
        setups(settings),
    )
