"""Builds the FastAPI application around one ModelService whose lifetime is the app's."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse

from service import auth
from service.config import Settings
from service.dataplane.service import ModelService
from service.front.native_path import NativePath
from service.front.protocols import docs_page, http_errors
from service.front.protocols.arriving import ArrivingBodies
from service.front.protocols.drain import LIVE_PATHS, MESSAGE, Drain
from service.front.protocols.fast_routes import FastRoutes
from service.front.protocols.h2_relay import PrivateSocket
from service.front.protocols.health import InlineProbes
from service.front.protocols.native import routes as http_routes
from service.front.protocols.offload import Offload
from service.front.protocols.v2_grpc.auth import TokenInterceptor
from service.front.protocols.v2_grpc.draining import DrainInterceptor
from service.front.protocols.v2_grpc.server import grpc_listener
from service.front.protocols.v2_rest import errors as v2_errors
from service.front.protocols.v2_rest import routes as v2_routes
from service.inline_policy import InlinePolicy
from service.shared.contract import Capability


class ServerApp(FastAPI):
    """FastAPI, except that the fast routes (service/front/protocols/fast_routes.py: the inference
    routes) go straight to their endpoints behind the same token check and 500 guard."""

    fast: FastRoutes  # set by create_app
    policy: auth.Policy  # likewise
    # The fronts' native path (service/front/native_path.py); None in a single process.
    native_path: NativePath | None = None
    # Health probes answered where they arrive (service/front/protocols/health.py).
    inline_probes: InlineProbes | None = None
    drain: Drain  # begun by the front's SIGTERM (service/front/draining.py)
    # With --one-port, where the HTTP transport relays HTTP/2 connections (gRPC's).
    h2_target: PrivateSocket | None = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            if self.drain.active and scope["path"] not in LIVE_PATHS:
                answer = JSONResponse({"error": MESSAGE}, 503, {"connection": "close"})
                return await answer(scope, receive, send)
            found = self.fast.match(scope["method"], scope["path"])
            if found is not None:
                endpoint, scope["path_params"], _ = found
                scope["app"] = self  # as Starlette sets it: handlers read app.state
                return await endpoint(scope, receive, send)
        await super().__call__(scope, receive, send)


def _openapi(app: FastAPI):
    """The schema of the app's routes and of its fast routes, from their declarations."""

    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=[*app.routes, *app.fast.schema_routes()],
            )
        return app.openapi_schema

    return openapi


def create_app(
    settings: Settings,
    service=None,
    offload_workers: int | None = None,
    drain: Drain | None = None,
    owns_service: bool = True,
) -> FastAPI:
    """`service`: the dataplane the protocols call; a front process passes its engine client
    (service/front/engine_client.py), and without one the app runs its own ModelService
    in-process. `drain`: what the front's SIGTERM begins (none begins it in a single process).
    `owns_service=False`: the caller starts and stops the dataplane and the app serves HTTP
    only (no gRPC listener): a Ray Serve replica's embedded engine (service/ray_serve.py)."""
    service = ModelService(settings) if service is None else service
    policy = auth.policy_for(settings)
    offload = Offload(offload_workers, InlinePolicy(settings.inline_execute_us))
    drain = Drain(settings.shutdown_grace_s) if drain is None else drain
    h2_target = PrivateSocket() if settings.one_port else None
    interceptors = [DrainInterceptor(drain), TokenInterceptor(policy)]

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        http_errors.clip_access_log()
        if not owns_service:
            try:
                yield
            finally:
                offload.close()
            return
        await service.start()
        try:
            async with grpc_listener(
                service, settings, interceptors, policy, h2_target, drain, app.native_path
            ):
                yield
        finally:
            offload.close()
            await service.stop()

    app = ServerApp(
        title="ExecuTorch/TensorRT model server",
        description="Deploy ExecuTorch programs (.pte + .ptd), checked at ingest, "
        "and run them on the native ExecuTorch host.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = service
    app.drain = drain
    app.h2_target = h2_target
    app.state.offload = offload
    app.state.arriving = ArrivingBodies(settings.max_client_arriving_bytes)

    def guarded(endpoint):
        # Without an inference token these paths check nothing: no layer to pass through.
        checked = auth.TokenAuth(endpoint, policy=policy) if policy.infer_token else endpoint
        return http_errors.UnexpectedErrors(checked)

    # The one table of routes served past FastAPI, each behind the token check and 500 guard.
    app.policy = policy
    app.fast = FastRoutes([http_routes.install(app), *v2_routes.FAST_ROUTES], guarded)
    recent_metrics = None
    if service.capabilities & Capability.ENGINE_LINK:  # requests cross to the engine
        renderers = {
            "native": http_errors.service_error_response,
            "v2": v2_errors.service_error_response,
        }
        app.native_path = NativePath(service, settings, policy.infer_token, renderers)
        if auth.http_scope("GET", "/metrics", policy.metrics_auth) == auth.OPEN:
            recent_metrics = service.recent_metrics
    app.inline_probes = InlineProbes(service, recent_metrics)
    v2_routes.install(app)
    docs_page.install(app)
    app.openapi = _openapi(app)
    # Outside the routes: nothing is read or routed for a request it denies.
    app.add_middleware(auth.TokenAuth, policy=policy)
    http_errors.install(app)
    return app
