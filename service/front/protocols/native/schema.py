"""Pydantic shapes of the HTTP API, so the OpenAPI page documents what clients send and get."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field

from service import oip
from service.dtypes import DATATYPES
from service.front.protocols.http_errors import ProblemModel
from service.front.protocols.json_tensors import MAX_DIM, MAX_DIMS


class FileModel(BaseModel):
    name: str
    role: str = Field(description="program or data")
    bytes: int
    sha256: str


class DelegateModel(BaseModel):
    index: int
    backend: str
    details: dict[str, Any] = {}


class MethodModel(BaseModel):
    name: str
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    delegates: list[DelegateModel]
    external_data_keys: list[str] = []
    planned_buffers: list[dict[str, Any]] = []


class MemoryModel(BaseModel):
    resident_bytes: int | None = Field(
        description="the two resident figures below together (None where they cannot be read)"
    )
    mapped_files_resident_bytes: int | None = Field(
        description="pages of the model's mapped .pte/.ptd files in RAM: weights a kernel read"
    )
    planned_arena_bytes: int = Field(
        description="host memory allocated for the planned arenas of the method instances"
    )
    planned_arena_resident_bytes: int | None = Field(
        description="the part of the arenas in RAM (written by an execute)"
    )


class VersionModel(BaseModel):
    version: str
    state: str = Field(description="ready, or unavailable (with `error` saying why)")
    error: str | None = None
    unavailable_reason: str | None = None
    files: list[FileModel]
    warmup_s: float | None = None


class ModelDescription(BaseModel):
    name: str
    version: str | None = Field(
        None, description="the version described: the highest served, else the newest stored"
    )
    versions: list[VersionModel] = Field(
        [], description="every stored version with its state (the version_policy picks which serve)"
    )
    state: str = Field(
        description="ready, or unavailable when a stored model failed to load "
        "or cannot run on this host"
    )
    runnable: bool = Field(
        True,
        description="false when ingest stored the model knowing it "
        "cannot run on this host (unverified plans)",
    )
    unavailable_reason: str | None = Field(None, description="why it cannot run, when not runnable")
    files: list[FileModel]
    methods: list[MethodModel]
    warnings: list[str] = []
    config: dict[str, Any] = Field(
        {},
        description="model configuration (Triton's names: "
        "max_batch_size, dynamic_batching, "
        "instance_group, model_warmup); {} when none was sent",
    )
    warmup_s: float | None = Field(
        None,
        description="seconds the configuration's model_warmup took, on every instance, "
        "before the model served",
    )
    memory: MemoryModel | None = Field(
        None,
        description="what of a ready model the server process holds in RAM now: weights are "
        "mapped from its files, so they count once read; a program that copies weights (e.g. "
        "nn.Linear lowered to permute_copy of the weight) holds the copies in its arenas",
    )
    error: str | None = None
    problems: list[ProblemModel] = Field([], description="why a model directory entry was refused")


class InferInput(BaseModel):
    name: str | None = None
    shape: list[Annotated[int, Field(ge=0, le=MAX_DIM)]] = Field(max_length=MAX_DIMS)
    datatype: str = Field(
        description="BOOL, UINT8, INT8, INT16, INT32, INT64, FP16, FP32, FP64 or BF16",
        json_schema_extra={"enum": list(DATATYPES)},
    )
    data: list[Any]


class InferRequest(BaseModel):
    model: str
    method: str = oip.DEFAULT_METHOD
    inputs: list[InferInput]


class InferOutput(BaseModel):
    name: str
    shape: list[int]
    datatype: str
    data: list[Any]


class InferResponse(BaseModel):
    model: str
    method: str
    outputs: list[InferOutput]


class HealthBody(BaseModel):
    status: str
    error: str | None = None  # why not ready
