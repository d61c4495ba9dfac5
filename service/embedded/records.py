"""The embedded engine's typed records: what Engine (service/embedded/engine.py) takes and gives.

The server's JSON bodies are views of the same state (the native API's description, Triton's
statistics object); these records name the fields a program reads, and keep the whole view in
`description`/`raw` so nothing the server shows is out of an embedding program's reach.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from service.dataplane.types import MethodSignature


@dataclass(frozen=True)
class VersionState:
    """One stored version of a model: `state` is "ready" or "unavailable" (`reason` says why)."""

    version: str
    state: str
    reason: str | None = None


@dataclass(frozen=True)
class ModelInfo:
    """A model as the server's `GET /models/{name}` describes it (`description` holds that
    body whole): its default version, that version's methods, and every stored version."""

    name: str
    version: str | None
    state: str
    reason: str | None
    methods: dict[str, MethodSignature]
    versions: tuple[VersionState, ...]
    config: dict
    warnings: tuple[str, ...]
    description: dict = field(repr=False)

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    @classmethod
    def from_description(
        cls, view: dict, methods: dict[str, MethodSignature] | None = None
    ) -> ModelInfo:
        reason = view.get("unavailable_reason") or view.get("error")
        return cls(
            name=view["name"],
            version=view.get("version"),
            state=view["state"],
            reason=reason,
            methods=methods or {},
            versions=tuple(
                VersionState(
                    v["version"], v["state"], v.get("unavailable_reason") or v.get("error")
                )
                for v in view.get("versions", ())
            ),
            config=view.get("config") or {},
            warnings=tuple(str(w) for w in view.get("warnings", ())),
            description=view,
        )


@dataclass(frozen=True)
class InferResult:
    """One request's answer: the version that ran it and its outputs by name, in the order the
    method declares them (or the order asked for)."""

    model: str
    version: str
    method: str
    outputs: dict[str, np.ndarray]
    id: str | None = None

    def __getitem__(self, name: str) -> np.ndarray:
        return self.outputs[name]


@dataclass(frozen=True)
class ModelStatistics:
    """One served version's counts, as the statistics extension reports them (`raw`: Triton's
    ModelStatistics object, with every phase's count and nanoseconds)."""

    name: str
    version: str
    inference_count: int
    execution_count: int
    raw: dict = field(repr=False)

    @classmethod
    def from_entry(cls, entry: dict) -> ModelStatistics:
        return cls(
            entry["name"],
            entry["version"],
            entry["inference_count"],
            entry["execution_count"],
            entry,
        )
