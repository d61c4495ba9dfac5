"""inference.GRPCInferenceService handlers: thin translations onto the ModelService dataplane.

Handlers take parsed requests and raise ServiceErrors; binding.py turns bytes into requests,
responses into bytes and errors into status codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

import numpy as np
from google.protobuf import json_format

from service import oip, rules
from service.dataplane.repository import load_config
from service.dataplane.service import ModelService
from service.dataplane.types import InferRequest, InferResponse, Tensor
from service.errors import Invalid, NotFound, clip, invalid
from service.front.protocols.v2_grpc import codec, messages, wire
from service.front.protocols.v2_grpc.binding import off_loop
from service.front.protocols.v2_grpc.shared_memory import (
    SharedMemoryRpcs,
    engine_of,
    set_output_parameters,
    split_inputs,
)

# Repository load and unload parameters, as Triton's clients send them.
CONFIG, FILE_PREFIX, UNLOAD_DEPENDENTS = "config", "file:", "unload_dependents"
READY = "READY"


def _parameter_value(parameter):
    choice = parameter.WhichOneof("parameter_choice")
    return None if choice is None else getattr(parameter, choice)


def _parameters(entries) -> dict:
    return {key: _parameter_value(value) for key, value in entries.items()}


def _set_parameter(target, value) -> None:
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        target.int64_param = value
    elif isinstance(value, float):
        target.double_param = value
    else:
        target.string_param = str(value)


def _timeout_s(parameters: dict, remaining_s: float | None) -> float | None:
    """The request's wait limit: its `timeout` parameter or the call's deadline, the sooner."""
    micros = parameters.pop(oip.TIMEOUT_PARAMETER, None)
    if micros is not None and (
        isinstance(micros, bool) or not isinstance(micros, int) or micros < 0
    ):
        raise Invalid(
            f"parameter 'timeout' must be a non-negative integer of microseconds, got "
            f"{clip(micros)!r}"
        )
    limits = [s for s in (micros / 1e6 if micros else None, remaining_s) if s is not None]
    return min(limits) if limits else None


def _requested_outputs(outputs) -> list[str] | None:
    for output in outputs:
        if "classification" in output.parameters:
            raise Invalid(
                f"output {clip(output.name)!r}: the classification extension is not served"
            )
    return [output.name for output in outputs] or None


def _load_parameters(parameters: dict) -> tuple[dict[str, bytes] | None, dict | None]:
    """A repository load's files ({"<version>/<filename>": bytes}) and model configuration."""
    files, config = {}, None
    for key, value in parameters.items():
        if key == CONFIG:
            config = load_config(value)
        elif key.startswith(FILE_PREFIX):
            path = key[len(FILE_PREFIX) :]
            if not isinstance(value, bytes):
                raise invalid(
                    rules.REPOSITORY_FILE,
                    f"{clip(key)!r} must carry the file's bytes (bytes_param)",
                    clip(path),
                )
            files[path] = value
        else:
            raise invalid(
                rules.REPOSITORY_PARAMETER,
                f"unknown load parameter {clip(key)!r}; expected 'config' or "
                f"'{FILE_PREFIX}<version>/<filename>'",
            )
    return files or None, config


def _server_version() -> str:
    try:
        return metadata.version(oip.SERVER_NAME)
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


@dataclass
class ParsedInfer:
    """A ModelInferRequest with its input tensors already decoded (see parse_infer)."""

    request: object
    inputs: list[tuple[str, str, np.ndarray]]
    shared: object = None  # service/shm/refs.py SharedTensors, when any tensor is in a region


_RAW_INPUTS = messages.field_number("ModelInferRequest", "raw_input_contents")
_RAW_OUTPUTS = messages.field_number("ModelInferResponse", "raw_output_contents")


def parse_infer(data: bytes) -> ParsedInfer:
    """The request's raw tensors become arrays over the received bytes (wire.py); the rest is
    parsed by protobuf."""
    rest, raw_contents = wire.split_field(data, _RAW_INPUTS)
    request = messages.ModelInferRequest.FromString(rest)
    shared, plain, placed = split_inputs(request)
    if not shared:
        return ParsedInfer(request, codec.decode_inputs(request.inputs, raw_contents))
    return ParsedInfer(request, codec.decode_inputs(plain, raw_contents) + placed, shared)


def _infer_response(result: InferResponse, shared=None) -> bytes:
    response = messages.ModelInferResponse(
        model_name=result.model, model_version=result.version, id=result.id or ""
    )
    for key, value in result.parameters.items():
        _set_parameter(response.parameters[key], value)
    raw = []
    for tensor in result.outputs:
        output = response.outputs.add(
            name=tensor.name, datatype=tensor.datatype, shape=list(tensor.array.shape)
        )
        ref = shared.outputs.get(tensor.name) if shared else None
        if ref is None:
            raw.append(codec.encode_raw(tensor.name, tensor.datatype, tensor.array))
        else:  # written into its region: no bytes here
            set_output_parameters(output, ref, tensor)
            raw.append(b"")
    while raw and not len(raw[-1]) and shared:  # nothing after the last output with bytes
        raw.pop()
    return wire.join_field(response.SerializeToString(), _RAW_OUTPUTS, raw)


class InferenceServicer(SharedMemoryRpcs):
    """One method per RPC, named as in grpc_service.proto, each `async (request, context)`;
    PARSERS names the RPCs whose requests are more than their message."""

    PARSERS = {"ModelInfer": parse_infer}

    def __init__(self, service: ModelService):
        self.service = service
        self.version = _server_version()

    async def ServerLive(self, request, context):
        return messages.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        return messages.ServerReadyResponse(ready=self.service.ready)

    async def ModelReady(self, request, context):
        # Readiness never errors: an unknown model or version is simply not ready.
        try:
            ready = await self.service.model_ready(request.name, request.version or None)
        except NotFound:
            ready = False
        return messages.ModelReadyResponse(ready=ready)

    async def ServerMetadata(self, request, context):
        return messages.ServerMetadataResponse(
            name=oip.SERVER_NAME, version=self.version, extensions=oip.EXTENSIONS
        )

    async def ModelMetadata(self, request, context):
        signatures = await self.service.signatures(request.name, request.version or None)
        signature = signatures.get(oip.DEFAULT_METHOD)
        response = messages.ModelMetadataResponse(
            name=request.name,
            versions=await self.service.served_versions(request.name),
            platform=oip.PLATFORM,
        )
        for specs, target in (
            ((signature.inputs, response.inputs), (signature.outputs, response.outputs))
            if signature
            else ()
        ):
            for spec in specs:
                target.add(
                    name=spec.name,
                    datatype=spec.datatype or "UNSUPPORTED",
                    shape=spec.published_shape,
                )
        return response

    async def ModelConfig(self, request, context):
        # The dataplane's dict has model_config.proto's field names and enum value names.
        response = messages.ModelConfigResponse()
        json_format.ParseDict(
            await self.service.model_config(request.name, request.version or None),
            response.config,
        )
        return response

    async def ModelInfer(self, parsed: ParsedInfer, context):
        request = parsed.request
        parameters = _parameters(request.parameters)
        method = parameters.pop(oip.METHOD_PARAMETER, oip.DEFAULT_METHOD)
        if not isinstance(method, str):
            raise Invalid(f"parameter 'method' must be a string, got {clip(method)!r}")
        service = engine_of(self.service) if parsed.shared else self.service
        result = await service.infer(
            InferRequest(
                model=request.model_name,
                inputs=[Tensor(*item) for item in parsed.inputs],
                method=method,
                version=request.model_version or None,
                id=request.id or None,
                outputs=_requested_outputs(request.outputs),
                timeout_s=_timeout_s(parameters, context.time_remaining()),
                parameters=parameters,
                shared_memory=parsed.shared,
                protocol="gRPC",
            )
        )
        try:
            return await off_loop(
                sum(t.array.nbytes for t in result.outputs), _infer_response, result, parsed.shared
            )
        finally:
            result.release()

    async def RepositoryIndex(self, request, context):
        response = messages.RepositoryIndexResponse()
        for entry in await self.service.repository_index():
            if not request.ready or entry["state"] == READY:
                response.models.add(**entry)
        return response

    async def RepositoryModelLoad(self, request, context):
        files, config = _load_parameters(_parameters(request.parameters))
        await self.service.load_model(request.model_name, files, config)
        return messages.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request, context):
        unknown = sorted(set(request.parameters) - {UNLOAD_DEPENDENTS})
        if unknown:
            raise invalid(
                rules.REPOSITORY_PARAMETER,
                f"unknown unload parameter(s) {clip(', '.join(unknown))}; expected "
                f"{UNLOAD_DEPENDENTS!r} (models here have no dependents)",
            )
        await self.service.unload_model(request.model_name)
        return messages.RepositoryModelUnloadResponse()

    async def ModelStatistics(self, request, context):
        # NOT_FOUND: unknown model or version
        entries = await self.service.model_stats(request.name or None, request.version or None)
        response = messages.ModelStatisticsResponse()
        for entry in entries:
            # The dataplane's dict has Triton's field names; fields this schema leaves out
            # (memory_usage) are dropped.
            json_format.ParseDict(entry, response.model_stats.add(), ignore_unknown_fields=True)
        return response
