"""Binds the servicer to gRPC: bytes to requests, responses to bytes, ServiceErrors to statuses.

Handlers get raw bytes from gRPC (no deserializer) so that parsing happens here, where a large
message can leave the event loop: one copy of 100 MB takes about 0.1 s, and a request is
copied several times between the wire and the arrays (parse, bytes field, response building,
serialization), which on the loop would stall every other call, health checks included.

Every ServiceError becomes a status here and only here (STATUS), with its message as the
details and its problems, as JSON, in the `etrt-problems` trailing metadata; a busy refusal adds
its retry hint (`retry-after`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

import grpc
from google.protobuf.message import DecodeError

from service.errors import (
    Busy,
    Conflict,
    DeadlineExceeded,
    DeviceMemoryFull,
    ExecutionFailed,
    Forbidden,
    Invalid,
    NotFound,
    ServiceError,
    TooLarge,
    Unauthorized,
    Unavailable,
    retry_after_seconds,
)
from service.front.protocols.v2_grpc import messages
from service.shared.heap_tuning import release_freed_memory

log = logging.getLogger(__name__)

STATUS = {
    NotFound: grpc.StatusCode.NOT_FOUND,
    Conflict: grpc.StatusCode.ALREADY_EXISTS,
    Invalid: grpc.StatusCode.INVALID_ARGUMENT,
    TooLarge: grpc.StatusCode.RESOURCE_EXHAUSTED,
    DeviceMemoryFull: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
    Busy: grpc.StatusCode.UNAVAILABLE,
    DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    Unauthorized: grpc.StatusCode.UNAUTHENTICATED,
    Forbidden: grpc.StatusCode.PERMISSION_DENIED,
    ExecutionFailed: grpc.StatusCode.INTERNAL,
}
# The RPC the fronts' native path takes (service/front/native_path.py infer_grpc).
NATIVE_RPC = "ModelInfer"
# Below this many bytes a thread hop costs more than the copying it would move off the loop.
OFF_LOOP_BYTES = 1 << 20
# After a call of at least this many bytes, freed heap memory is handed back to the system.
TRIM_BYTES = 8 << 20
# Clients refuse metadata past a limit (8 KiB by default) with an error that would hide ours.
PROBLEMS_METADATA_CHARS = 4096


async def off_loop(size: int, function: Callable, *args):
    """function(*args), in a worker thread when it handles `size` bytes or more."""
    if size < OFF_LOOP_BYTES:
        return function(*args)
    return await asyncio.to_thread(function, *args)


def _status(exc: ServiceError) -> grpc.StatusCode:
    return next(code for kind, code in STATUS.items() if isinstance(exc, kind))


def problems_metadata(exc: ServiceError) -> tuple:
    """The `etrt-problems` trailing metadata: as many of the problems as fit, as JSON."""
    shown, text = [], "[]"
    for problem in exc.problems:
        candidate = json.dumps(shown + [problem.as_dict()])
        if len(candidate) > PROBLEMS_METADATA_CHARS:
            break
        shown.append(problem.as_dict())
        text = candidate
    return (("etrt-problems", text),) if shown else ()


def refusal(exc: ServiceError) -> tuple[str, tuple]:
    """The details and trailing metadata of a call refused with `exc`. A busy refusal (a full
    queue, a full arena, an engine restarting) says when to come back as REST's Retry-After
    does, in the same whole seconds: in the `retry-after` trailer and in the message, which is
    all that some clients show."""
    trailers = problems_metadata(exc)
    if not isinstance(exc, Busy):
        return exc.message, trailers
    seconds = retry_after_seconds(exc)
    return f"{exc.message} (retry after {seconds} s)", (*trailers, ("retry-after", str(seconds)))


def _refuse(
    context: grpc.aio.ServicerContext, code: grpc.StatusCode, message: str, trailers=()
) -> bytes:
    """Ends the call with a status by setting it, not by context.abort(): abort raises an
    AbortError that grpcio's own frames keep in a reference cycle, and with it every frame of
    the failed call and the request message they hold (64 MiB messages stayed resident until
    the garbage collector's next full pass). grpcio discards the response of a non-OK call."""
    context.set_trailing_metadata(trailers)
    context.set_code(code)
    context.set_details(message)
    return b""


async def _answered(
    name: str, context: grpc.aio.ServicerContext, answer: Awaitable
) -> bytes | None:
    """The call's response message, or its status for what went wrong (None: the native path
    declined the call)."""
    try:
        response = await answer
        if response is None or isinstance(response, bytes):
            return response
        return response.SerializeToString()
    except ServiceError as exc:
        return _refuse(context, _status(exc), *refusal(exc))
    except DecodeError:
        return _refuse(
            context,
            grpc.StatusCode.INVALID_ARGUMENT,
            f"the request is not a valid {name} request message",
        )
    except Exception:
        log.exception("gRPC %s failed", name)
        return _refuse(
            context,
            grpc.StatusCode.INTERNAL,
            f"{name} failed inside the server; its log has the details",
        )


def _bound(
    name: str, parse: Callable[[bytes], object], handler: Callable[..., Awaitable], native=None
) -> Callable[..., Awaitable[bytes]]:
    """`native`: the fronts' native path, offered ModelInfer's messages first."""

    async def call(wire: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            # The native path copies on the loop: a message the servicer would parse off the
            # loop is the servicer's. A deadline is kept by grpcio, which cancels the call then.
            if native is not None and len(wire) < OFF_LOOP_BYTES:
                taken = native.infer_grpc(wire, context.time_remaining())
                answer = await _answered(name, context, taken)
                if answer is not None:
                    return answer
            return await _answered(name, context, serve(wire, context))
        finally:
            if len(wire) >= TRIM_BYTES:
                await release_freed_memory()

    async def serve(wire: bytes, context: grpc.aio.ServicerContext):
        request = await off_loop(len(wire), parse, wire)
        return await handler(request, context)

    return call


def generic_handler(servicer, native_path=None) -> grpc.GenericRpcHandler:
    """Every RPC of the service descriptor, bound to the servicer's method of that name; its
    request is parsed by servicer.PARSERS[name] if there is one, else as the RPC's message.
    `native_path` (service/front/native_path.py, in a front) is offered each ModelInfer message
    first: what it takes goes from the message's bytes to the answer's without the servicer."""
    handlers = {}
    for method in messages.service_descriptor.methods:
        parse = (
            servicer.PARSERS.get(method.name) or messages.message(method.input_type.name).FromString
        )
        native = native_path if method.name == NATIVE_RPC else None
        handlers[method.name] = grpc.unary_unary_rpc_method_handler(
            _bound(method.name, parse, getattr(servicer, method.name), native)
        )
    return grpc.method_handlers_generic_handler(messages.SERVICE, handlers)
