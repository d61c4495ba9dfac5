"""The declared contract between a front and the engine: every call a front may make, as a typed
record naming its arguments and the type of its answer, and every note (told, never answered).

A front sends a call record (messages.Call) and awaits its Result; the engine serves each record
type with the one handler declared for it (service/engine/calls.py), and nothing else: a method
of the engine that is not named here cannot be reached from a front. Inference has messages of
its own (messages.Infer, and the lane's in lane_frames.py), as it is the hot path.

CONTRACT_VERSION names this set of calls, notes and messages (the lane's included). The front
states it when it joins and the engine states its own in the answer (service/shared/handshake.py):
a front and an engine of different versions refuse each other, saying both versions, instead
of misreading each other's messages. Change it with any change to a record, a message or the lane
layout (tests/unit/test_contract.py holds a digest of them that fails until it is bumped).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from service.dataplane.types import InferRequest, InferResponse, ModelTable
from service.errors import ServiceError

if TYPE_CHECKING:
    from service.config import Settings
    from service.dataplane.scheduling.gate import Refusal
    from service.ingest.staging import StagedUpload, Staging

CONTRACT_VERSION = 4


class Capability(enum.Flag):
    """What a dataplane (ModelService in one process, EngineClient in a front) offers beyond the
    calls both have; the app asks this rather than probing for attributes."""

    NONE = 0
    # Requests cross to an engine process over a link and an arena: the fronts' native path
    # (service/front/native_path.py) may take requests from their bytes.
    ENGINE_LINK = enum.auto()
    # Client shared memory regions can be registered (they live in the engine process).
    SHARED_MEMORY = enum.auto()


class Dataplane(Protocol):
    """What the protocols call, on ModelService in one process or on a front's EngineClient:
    the same methods on both, so no protocol knows which process runs the models (held by
    tests/unit/test_contract.py). The shm_* calls exist where SHARED_MEMORY is offered."""

    settings: Settings
    capabilities: ClassVar[Capability]

    @property
    def ready(self) -> bool: ...

    def not_ready_reason(self) -> str: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def serves(self, model: str, version: str | None = None) -> bool: ...

    async def model_ready(self, model: str, version: str | None = None) -> bool: ...

    def refuses(self, model: str, version: str | None, protocol: str) -> Refusal | None: ...

    async def infer(self, request: InferRequest) -> InferResponse: ...

    def body_buffer(self, nbytes: int, align_at: int) -> tuple[memoryview, object]: ...

    async def signatures(self, model: str, version: str | None = None) -> dict: ...

    async def served_versions(self, model: str) -> list[str]: ...

    async def model_config(self, model: str, version: str | None = None) -> dict: ...

    async def model_stats(self, model: str | None, version: str | None = None) -> list: ...

    async def list_models(self) -> list[dict]: ...

    async def describe(self, model: str, version: str | None = None) -> dict: ...

    async def metrics_text(self) -> str: ...

    async def repository_index(self) -> list[dict]: ...

    def begin_staging(self) -> Staging: ...

    async def deploy(self, upload: StagedUpload, received_s: float = 0.0) -> dict: ...

    def upload_refused(self, model: str | None, error: ServiceError, elapsed_s: float) -> None: ...

    async def load_model(self, model: str, files=None, config=None) -> dict: ...

    async def unload_model(self, model: str) -> None: ...

    async def delete(self, model: str, version: str | None = None) -> None: ...


class EngineFailed(Exception):
    """Stands in, in the front, for an unexpected failure in the engine: answered as a 500
    there, with the details in the engine's log."""


@dataclass(frozen=True, slots=True)
class EngineCall:
    """A call a front may make. `answers`: the type(s) its answer has (checked by the engine
    before it answers, so a handler that drifts from the contract fails loudly there)."""

    answers: ClassVar[type | tuple[type, ...]] = object


# -- the model table and model state ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetTable(EngineCall):
    """The served versions' signatures as of the engine's current generation."""

    answers: ClassVar = ModelTable


@dataclass(frozen=True, slots=True)
class ModelReady(EngineCall):
    model: str
    version: str | None = None
    answers: ClassVar = bool


@dataclass(frozen=True, slots=True)
class Signatures(EngineCall):
    model: str
    version: str | None = None
    answers: ClassVar = dict  # method name -> MethodSignature


@dataclass(frozen=True, slots=True)
class ServedVersions(EngineCall):
    model: str
    answers: ClassVar = list


@dataclass(frozen=True, slots=True)
class ModelConfig(EngineCall):
    model: str
    version: str | None = None
    answers: ClassVar = dict


@dataclass(frozen=True, slots=True)
class ModelStats(EngineCall):
    model: str | None  # None: every model
    version: str | None = None
    answers: ClassVar = list


@dataclass(frozen=True, slots=True)
class ListModels(EngineCall):
    answers: ClassVar = list


@dataclass(frozen=True, slots=True)
class Describe(EngineCall):
    model: str
    version: str | None = None
    answers: ClassVar = dict


@dataclass(frozen=True, slots=True)
class MetricsText(EngineCall):
    answers: ClassVar = str


@dataclass(frozen=True, slots=True)
class RepositoryIndex(EngineCall):
    answers: ClassVar = list


# -- changes -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Deploy(EngineCall):
    """An upload the front received into the staging area (which both processes share, under
    the artifacts root): the engine checks, stores and serves it, consuming its directory."""

    upload: StagedUpload
    received_s: float = 0.0  # how long receiving it took
    answers: ClassVar = dict


@dataclass(frozen=True, slots=True)
class Reload(EngineCall):
    """The repository `load` without files: serve the stored model again, re-ingested with
    `config` when one is given."""

    model: str
    config: dict | None = None
    answers: ClassVar = dict


@dataclass(frozen=True, slots=True)
class Unload(EngineCall):
    model: str
    answers: ClassVar = type(None)


@dataclass(frozen=True, slots=True)
class Delete(EngineCall):
    model: str
    version: str | None = None
    answers: ClassVar = type(None)


# -- client shared memory regions (service/shm/) ------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShmRegisterSystem(EngineCall):
    name: str
    key: str
    offset: int
    byte_size: int
    answers: ClassVar = type(None)


@dataclass(frozen=True, slots=True)
class ShmRegisterCuda(EngineCall):
    name: str
    raw_handle: bytes
    device_id: int
    byte_size: int
    answers: ClassVar = type(None)


@dataclass(frozen=True, slots=True)
class ShmStatus(EngineCall):
    kind: str  # "system" or "cuda"
    name: str | None = None
    answers: ClassVar = list


@dataclass(frozen=True, slots=True)
class ShmUnregister(EngineCall):
    kind: str
    name: str | None = None
    answers: ClassVar = type(None)


# -- notes: counted by the engine, never answered ------------------------------------------------


@dataclass(frozen=True, slots=True)
class RequestRefused:
    """A request the front refused before it crossed (as the engine counts its own)."""

    model: str
    method: str
    outcome: str  # how statistics count it: "busy", "client_error"
    elapsed_s: float
    version: str | None = None


@dataclass(frozen=True, slots=True)
class UploadRefused:
    """An upload refused while the front received it (too large, a malformed form)."""

    model: str | None
    error: ServiceError
    elapsed_s: float


@dataclass(frozen=True, slots=True)
class ArenaUsage:
    """A front's arena, reported when it changed (and requests its native path took)."""

    front: int
    in_use: int
    size: int
    native_requests: int


@dataclass(frozen=True, slots=True)
class MetricsScraped:
    """A front answered a scrape from the engine's last page (service/shared/metrics_snapshot.py):
    the engine keeps that page fresh while scrapes come."""


CALLS: tuple[type[EngineCall], ...] = (
    GetTable, ModelReady, Signatures, ServedVersions, ModelConfig, ModelStats, ListModels,
    Describe, MetricsText, RepositoryIndex, Deploy, Reload, Unload, Delete,
    ShmRegisterSystem, ShmRegisterCuda, ShmStatus, ShmUnregister,
)  # fmt: skip
NOTES = (RequestRefused, UploadRefused, ArenaUsage, MetricsScraped)
