"""Requests and responses of the dataplane: named numpy tensors, no wire format.

Each protocol decodes its wire format (JSON lists, binary tensor data, gRPC raw contents) into
these at its edge and encodes the response back, so the dataplane only checks tensors against
the method's signature and runs them. BF16 tensors carry uint16 bit patterns (service.dtypes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Tensor:
    name: str | None  # None: matched to the method's inputs by position (native API only)
    datatype: str  # Open Inference Protocol datatype
    array: np.ndarray


@dataclass
class InferRequest:
    model: str
    inputs: list[Tensor]
    method: str = "forward"
    version: str | None = None
    id: str | None = None
    # Names of the outputs to return, in that order; None returns all of them.
    outputs: list[str] | None = None
    parameters: dict = field(default_factory=dict)
    # Seconds the request may wait for an instance before it is dropped unexecuted.
    timeout_s: float | None = None
    # How a cancel of it is counted: "deadline_exceeded" once the engine hears that the client
    # stopped waiting at the request's deadline (a gRPC deadline), else its client went away.
    cancelled_as: str = "cancelled"
    # The shared-memory slot the protocol received the tensors into, if any
    # (service/shared/arena.py): whoever sends the request on holds it until the engine is done
    # with them.
    memory: object | None = None
    # The model-table generation at which a front checked the inputs against the method's
    # signature and put them in its order (service/front/engine_requests.py); None: not checked.
    checked_at: int | None = None
    # Tensors left in client shared memory regions (service/shm/refs.py SharedTensors); the
    # engine binds and writes them there.
    shared_memory: object | None = None
    # Where the outputs may be written instead of returned (the engine's room in a front's
    # arena, service/engine/outputs.py): anything with destinations(), as RequestShm has.
    output_room: object | None = None
    # The protocol (and encoding) that brought it: they take turns at the places of a full
    # queue (service/dataplane/scheduling/gate.py).
    protocol: str = ""


@dataclass
class InferResponse:
    model: str
    version: str
    method: str
    id: str | None
    outputs: list[Tensor]
    parameters: dict = field(default_factory=dict)
    # Frees the memory the output arrays view (a front's arena slot); protocols call release()
    # once the answer is sent, and must not touch the arrays after.
    on_release: Callable[[], None] | None = None

    def release(self) -> None:
        if self.on_release is not None:
            self.on_release()
            self.on_release = None


@dataclass(frozen=True)
class TensorSpec:
    """A method input or output as protocols publish it."""

    name: str
    datatype: str | None  # None: a dtype no protocol datatype exists for
    shape: list[int]  # upper bounds where dynamic
    dynamic: bool
    tag: str = "Tensor"

    @property
    def published_shape(self) -> list[int]:
        """The Open Inference Protocol shape: -1 for every dimension that may vary."""
        return [-1 for _ in self.shape] if self.dynamic else list(self.shape)


@dataclass(frozen=True)
class MethodSignature:
    name: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]

    def input_names(self) -> list[str]:
        return [spec.name for spec in self.inputs]

    def output_names(self) -> list[str]:
        return [spec.name for spec in self.outputs]


@dataclass(frozen=True)
class ModelEntry:
    """A ready model as a front sees it: enough to refuse a bad request before it crosses."""

    signatures: dict[str, MethodSignature]
    max_batch: int  # > 0: dim 0 of every input and output is the batch
    version: str = "1"
    # Method -> its route in the engine's native lane (service/engine/lane_routes.py), for the
    # methods the lane may serve; a request to one travels as a lane request.
    routes: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelTable:
    """The served model versions as of one `generation` of the engine's model state: `models`
    holds each model's default version (what an unversioned request runs on), `versions` every
    served version by (model, version)."""

    generation: int
    models: dict[str, ModelEntry]
    versions: dict[tuple[str, str], ModelEntry] = field(default_factory=dict)

    def entry(self, model: str, version: str | None) -> ModelEntry | None:
        return self.models.get(model) if not version else self.versions.get((model, version))
