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
from service.protocols.body_limit import JsonBodyLimit
from service.dataplane.service import ModelService
from service.protocols.v2_grpc.auth import TokenInterceptor
from service.protocols.v2_grpc.server import grpc_listener


def create_app(settings: Settings) -> FastAPI:
    service = ModelService(settings)
    policy = auth.policy_for(settings)
    stop_v2 = None

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        http_errors.clip_access_log()
        await service.start()
        try:
            async with grpc_listener(service, settings, [TokenInterceptor(policy)]):
                yield
        finally:
            stop_v2()
            await service.stop()

    app = FastAPI(title="ExecuTorch/TensorRT model server",
                  description="Deploy ExecuTorch programs (.pte + .ptd), checked at ingest, and "
                              "run them on the native ExecuTorch host.",
                  lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.service = service
    http_routes.install(app)
    stop_v2 = v2_routes.install(app)
    docs_page.install(app)
    app.add_middleware(JsonBodyLimit, max_bytes=settings.max_infer_bytes)
    # Outside the body limit and the routes: nothing is read or routed for a request it denies.
    app.add_middleware(auth.TokenAuth, policy=policy)
    http_errors.install(app)
    return app
