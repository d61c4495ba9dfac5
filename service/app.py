"""Builds the FastAPI application around one ModelService whose lifetime is the app's."""
from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from service import auth
from service.protocols.native import routes as http_routes
from service.config import Settings
from service.protocols import docs_page
from service.protocols.body_limit import JsonBodyLimit
from service.dataplane.service import ModelService


def create_app(settings: Settings) -> FastAPI:
    service = ModelService(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(title="ExecuTorch/TensorRT model server",
                  description="Deploy ExecuTorch programs (.pte + .ptd), checked at ingest, and "
                              "run them on the native ExecuTorch host.",
                  lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.service = service
    http_routes.install(app)
    docs_page.install(app)
    app.add_middleware(JsonBodyLimit, max_bytes=settings.max_infer_bytes)
    # Added last, so it runs first: nothing is read or routed for a request it denies.
    app.add_middleware(auth.TokenAuth, policy=auth.policy_for(settings))
    return app
