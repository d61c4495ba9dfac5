"""Builds the FastAPI application around one ModelService whose lifetime is the app's."""
from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from service import auth
from service.protocols import http_errors
from service.protocols.native import routes as http_routes
from service.protocols.v2_rest import routes as v2_routes
from service.config import Settings
from service.protocols import docs_page
from service.protocols.offload import Offload
from service.dataplane.service import ModelService
from service.protocols.v2_grpc.auth import TokenInterceptor
from service.protocols.v2_grpc.server import grpc_listener


class ServerApp(FastAPI):
    """FastAPI, except that POST /infer goes straight to its endpoint behind the same token check
    and 500 guard (protocols/native/infer_endpoint.py says why). Taking this door or the router's
    gives the same answers; this one skips FastAPI's per-request work."""

    infer = None  # the ASGI stack for POST /infer, set by create_app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] == "/infer" and scope["method"] == "POST":
            await self.infer(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


def create_app(settings: Settings) -> FastAPI:
    service = ModelService(settings)
    policy = auth.policy_for(settings)
    offload = Offload()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        http_errors.clip_access_log()
        await service.start()
        try:
            async with grpc_listener(service, settings, [TokenInterceptor(policy)]):
                yield
        finally:
            offload.close()
            await service.stop()

    app = ServerApp(title="ExecuTorch/TensorRT model server",
                    description="Deploy ExecuTorch programs (.pte + .ptd), checked at ingest, "
                                "and run them on the native ExecuTorch host.",
                    lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.service = service
    app.state.offload = offload
    infer_endpoint = http_routes.install(app)
    v2_routes.install(app)
    docs_page.install(app)
    # Outside the routes: nothing is read or routed for a request it denies.
    app.add_middleware(auth.TokenAuth, policy=policy)
    http_errors.install(app)
    app.infer = http_errors.UnexpectedErrors(auth.TokenAuth(infer_endpoint, policy=policy))
    return app
