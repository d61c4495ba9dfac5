"""The gRPC listener: served by the HTTP server's process and event loop, over its ModelService.

It lives exactly as long as the app (its lifespan enters `grpc_listener`), so both protocols see
one set of models, one set of metrics and one shutdown. Interceptors (e.g. bearer tokens) are
passed to `grpc_listener` and run before every handler. With --one-port it also listens on the
front's private socket, where the HTTP port relays the connections that speak HTTP/2
(service/front/protocols/h2_relay.py); with --grpc-port 0 it listens only there.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import grpc

from service import auth
from service.config import Settings
from service.dataplane.service import ModelService
from service.front.protocols.drain import Drain
from service.front.protocols.h2_relay import PrivateSocket
from service.front.protocols.v2_grpc import health
from service.front.protocols.v2_grpc.binding import generic_handler
from service.front.protocols.v2_grpc.servicer import InferenceServicer

log = logging.getLogger(__name__)
# gRPC message sizes are C ints.
_INT32_MAX = 2**31 - 1
# Seconds in-flight calls get to finish at a shutdown that no drain preceded.
_SHUTDOWN_GRACE_S = 5.0


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def start(
    service: ModelService,
    settings: Settings,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    policy: auth.Policy | None = None,
    private: PrivateSocket | None = None,
    native_path=None,
) -> grpc.aio.Server:
    """`policy`: the tokens the interceptors check, which the health service applies to model
    checks itself (its calls carry the model in the message, not in the method). `private`: the
    socket the HTTP port relays HTTP/2 connections to. `native_path`: a front's
    (service/front/native_path.py), offered each ModelInfer first."""
    server = grpc.aio.server(
        interceptors=tuple(interceptors),
        options=(
            # A request message is the same thing as an /infer body, so the same limit applies;
            # gRPC itself refuses a larger one with RESOURCE_EXHAUSTED before it is parsed.
            ("grpc.max_receive_message_length", min(settings.max_infer_bytes, _INT32_MAX)),
            ("grpc.max_send_message_length", -1),
            # Several fronts of one server share the port (the supervisor checked that it was
            # free first); a single front must fail to start on a busy port, not share it.
            ("grpc.so_reuseport", int(settings.workers > 1)),
        ),
    )
    server.add_generic_rpc_handlers((generic_handler(InferenceServicer(service), native_path),))
    health.add_to(server, service, policy)  # grpc.health.v1, for Kubernetes' gRPC probes
    addresses = [_address(settings.host, settings.grpc_port)] if settings.grpc_port else []
    if private is not None:
        addresses.append(private.grpc_address)
    for address in addresses:
        try:
            server.add_insecure_port(address)
        except RuntimeError as exc:
            raise RuntimeError(f"gRPC cannot listen on {address}: {exc}") from None
    await server.start()
    shown = addresses[:1] if settings.grpc_port else []
    if private is not None:
        shown.append(f"the HTTP port {settings.port} (h2c)")
    log.info(
        "gRPC (inference.GRPCInferenceService, grpc.health.v1) listening on %s", " and ".join(shown)
    )
    return server


@asynccontextmanager
async def grpc_listener(
    service: ModelService,
    settings: Settings,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    policy: auth.Policy | None = None,
    private: PrivateSocket | None = None,
    drain: Drain | None = None,
    native_path=None,
) -> AsyncIterator[None]:
    """Serves gRPC for the duration of the block; grpc_port 0 without `private` serves nothing.
    At its end, calls in flight get what is left of the drain's grace."""
    if not settings.grpc_port and private is None:
        yield
        return
    server = await start(service, settings, interceptors, policy, private, native_path)
    try:
        yield
    finally:
        await server.stop(drain.remaining_s() if drain and drain.active else _SHUTDOWN_GRACE_S)
