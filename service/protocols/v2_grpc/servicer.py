"""inference.GRPCInferenceService handlers: thin translations onto the ModelService dataplane.

Every ServiceError becomes a gRPC status here and only here (STATUS), with the error's message
as the status details and its problems, as JSON, in the `etrt-problems` trailing metadata.
"""
from __future__ import annotations

import asyncio
import json
import logging
from importlib import metadata
from typing import Awaitable, Callable

import grpc
from google.protobuf import json_format

from service.dataplane.service import MODEL_VERSION, ModelService
from service.dataplane.types import InferRequest, MethodSignature, Tensor
from service.errors import (Busy, Conflict, DeadlineExceeded, ExecutionFailed, Forbidden, Invalid,
                            NotFound, Problem, ServiceError, TooLarge, Unauthorized, Unavailable,
                            clip)
from service.protocols.v2_grpc import codec, messages

log = logging.getLogger(__name__)

STATUS = {NotFound: grpc.StatusCode.NOT_FOUND, Conflict: grpc.StatusCode.ALREADY_EXISTS,
          Invalid: grpc.StatusCode.INVALID_ARGUMENT, TooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
          Unavailable: grpc.StatusCode.UNAVAILABLE, Busy: grpc.StatusCode.UNAVAILABLE,
          DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
          Unauthorized: grpc.StatusCode.UNAUTHENTICATED,
          Forbidden: grpc.StatusCode.PERMISSION_DENIED,
          ExecutionFailed: grpc.StatusCode.INTERNAL}
SERVER_NAME = "etrt-server"
PLATFORM = "executorch"
# Request parameters this server reads itself; all others reach the dataplane unchanged.
METHOD_PARAMETER = "method"      # which program method to run (default "forward")
TIMEOUT_PARAMETER = "timeout"    # microseconds the request may wait, as Triton's clients send it
# Repository load and unload parameters, as Triton's clients send them.
CONFIG, FILE_PREFIX, UNLOAD_DEPENDENTS = "config", "file:", "unload_dependents"
READY = "READY"


def _status(exc: ServiceError) -> grpc.StatusCode:
    return next(code for kind, code in STATUS.items() if isinstance(exc, kind))


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
    micros = parameters.pop(TIMEOUT_PARAMETER, None)
    if micros is not None and (isinstance(micros, bool) or not isinstance(micros, int)
                               or micros < 0):
        raise Invalid(f"parameter 'timeout' must be a non-negative integer of microseconds, got "
                      f"{clip(micros)!r}")
    limits = [s for s in (micros / 1e6 if micros else None, remaining_s) if s is not None]
    return min(limits) if limits else None


def _requested_outputs(outputs) -> list[str] | None:
    for output in outputs:
        if "classification" in output.parameters:
            raise Invalid(f"output {clip(output.name)!r}: the classification extension is not "
                          "served")
    return [output.name for output in outputs] or None


def _invalid(rule: str, message: str, file: str | None = None) -> Invalid:
    return Invalid(message, [Problem(file, rule, message)])


def _load_parameters(parameters: dict) -> tuple[dict[str, bytes] | None, dict | None]:
    """A repository load's files ({"<version>/<filename>": bytes}) and model configuration."""
    files, config = {}, None
    for key, value in parameters.items():
        if key == CONFIG:
            if not isinstance(value, str):
                raise _invalid("repository.config", "'config' must be a string of JSON")
            try:
                config = json.loads(value)
            except (ValueError, RecursionError) as exc:
                raise _invalid("repository.config",
                               f"'config' is not valid JSON: {clip(exc)}") from None
            if not isinstance(config, dict):
                raise _invalid("repository.config", "'config' must be a JSON object")
        elif key.startswith(FILE_PREFIX):
            path = key[len(FILE_PREFIX):]
            if not isinstance(value, bytes):
                raise _invalid("repository.file", f"{clip(key)!r} must carry the file's bytes "
                               "(bytes_param)", clip(path))
            files[path] = value
        else:
            raise _invalid("repository.parameter",
                           f"unknown load parameter {clip(key)!r}; expected 'config' or "
                           f"'{FILE_PREFIX}<version>/<filename>'")
    return files or None, config


def _published(signatures: dict[str, MethodSignature]) -> MethodSignature | None:
    """The method a model's metadata describes: `forward`, else its first method."""
    return signatures.get("forward") or next(iter(signatures.values()), None)


def _server_version() -> str:
    try:
        return metadata.version(SERVER_NAME)
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


class InferenceServicer:
    """One method per RPC, named as in grpc_service.proto, each `async (request, context)`."""

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
            ready = self.service.model_ready(request.name, request.version or None)
        except NotFound:
            ready = False
        return messages.ModelReadyResponse(ready=ready)

    async def ServerMetadata(self, request, context):
        return messages.ServerMetadataResponse(name=SERVER_NAME, version=self.version,
                                               extensions=EXTENSIONS)

    async def ModelMetadata(self, request, context):
        signature = _published(self.service.signatures(request.name, request.version or None))
        response = messages.ModelMetadataResponse(name=request.name, versions=[MODEL_VERSION],
                                                  platform=PLATFORM)
        for specs, target in ((signature.inputs, response.inputs),
                              (signature.outputs, response.outputs)) if signature else ():
            for spec in specs:
                target.add(name=spec.name, datatype=spec.datatype or "UNSUPPORTED",
                           shape=spec.published_shape)
        return response

    async def ModelInfer(self, request, context):
        if request.raw_input_contents:
            decoded = codec.decode_inputs(request.inputs, request.raw_input_contents)
        else:  # typed lists are converted element by element: keep that off the event loop
            decoded = await asyncio.to_thread(codec.decode_inputs, request.inputs, ())
        parameters = _parameters(request.parameters)
        method = parameters.pop(METHOD_PARAMETER, "forward")
        if not isinstance(method, str):
            raise Invalid(f"parameter 'method' must be a string, got {clip(method)!r}")
        result = await self.service.infer(InferRequest(
            model=request.model_name, inputs=[Tensor(*item) for item in decoded], method=method,
            version=request.model_version or None, id=request.id or None,
            outputs=_requested_outputs(request.outputs),
            timeout_s=_timeout_s(parameters, context.time_remaining()), parameters=parameters))
        response = messages.ModelInferResponse(model_name=result.model,
                                               model_version=result.version, id=result.id or "")
        for key, value in result.parameters.items():
            _set_parameter(response.parameters[key], value)
        for tensor in result.outputs:
            response.raw_output_contents.append(
                codec.encode_raw(tensor.name, tensor.datatype, tensor.array))
            response.outputs.add(name=tensor.name, datatype=tensor.datatype,
                                 shape=list(tensor.array.shape))
        return response

    async def RepositoryIndex(self, request, context):
        response = messages.RepositoryIndexResponse()
        for entry in self.service.repository_index():
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
            raise _invalid("repository.parameter",
                           f"unknown unload parameter(s) {clip(', '.join(unknown))}; expected "
                           f"{UNLOAD_DEPENDENTS!r} (models here have no dependents)")
        await self.service.unload_model(request.model_name)
        return messages.RepositoryModelUnloadResponse()

    async def ModelStatistics(self, request, context):
        version = request.version or None
        if request.name:
            self.service.signatures(request.name, version)  # NOT_FOUND: unknown model or version
            names = [request.name]
        else:
            names = self.service.model_names()
        response = messages.ModelStatisticsResponse()
        for name in names:
            # The dataplane's dict has Triton's field names; fields this schema leaves out
            # (memory_usage) are dropped.
            json_format.ParseDict(
                self.service.statistics.model_stats(name, version or MODEL_VERSION),
                response.model_stats.add(), ignore_unknown_fields=True)
        return response


# Extensions of the protocol this service implements, as ServerMetadata lists them.
EXTENSIONS = ("model_repository", "statistics")


def _guarded(name: str, handler: Callable[..., Awaitable]) -> Callable[..., Awaitable]:
    async def call(request, context):
        try:
            return await handler(request, context)
        except ServiceError as exc:
            problems = json.dumps([p.as_dict() for p in exc.problems])
            context.set_trailing_metadata((("etrt-problems", problems),))
            await context.abort(_status(exc), exc.message)
        except grpc.aio.AbortError:
            raise
        except Exception:
            log.exception("gRPC %s failed", name)
            await context.abort(grpc.StatusCode.INTERNAL,
                                f"{name} failed inside the server; its log has the details")
    return call


def generic_handler(servicer: InferenceServicer) -> grpc.GenericRpcHandler:
    """Every RPC of the service descriptor, bound to the servicer's method of that name."""
    handlers = {}
    for method in messages.service_descriptor.methods:
        request_class = messages.message(method.input_type.name)
        response_class = messages.message(method.output_type.name)
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            _guarded(method.name, getattr(servicer, method.name)),
            request_deserializer=request_class.FromString,
            response_serializer=response_class.SerializeToString)
    return grpc.method_handlers_generic_handler(messages.SERVICE, handlers)
