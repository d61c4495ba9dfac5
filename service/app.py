"""Builds the FastAPI application around one ModelService whose lifetime is the app's."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from service import auth
from service.config import Settings
from service.dataplane.service import ModelService
from service.protocols import docs_page, http_errors
from service.protocols.native import routes as http_routes
from service.protocols.offload import Offload
from service.protocols.v2_grpc.auth import TokenInterceptor
from service.protocols.v2_grpc.server import grpc_listener
from service.protocols.v2_rest import routes as v2_routes


class ServerApp(FastAPI):
    """FastAPI, except that the inference routes (POST /infer, POST /v2/models/.../infer) go
    straight to their endpoints behind the same token check and 500 guard: FastAPI's per-request
    work costs more than running a small program (protocols/native/infer_endpoint.py). Taking
    this door or the router's gives the same answers."""

    # The ASGI stacks of the two inference endpoints, set by create_app.
    native_infer = v2_infer = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path = scope["path"]
            if path == "/infer":
                return await self.native_infer(scope, receive, send)
            if path.startswith("/v2/models/") and v2_routes.INFER_PATH.fullmatch(path):
                scope["app"] = self  # as Starlette sets it: the handler reads app.state
                return await self.v2_infer(scope, receive, send)
        await super().__call__(scope, receive, send)


def create_app(settings: Settings, service=None, offload_workers: int | None = None) -> FastAPI:
    """`service`: the dataplane the protocols call; a front process passes its engine client
    (service/engine/client.py), and without one the app runs its own ModelService in-process."""
    service = ModelService(settings) if service is None else service
    policy = auth.policy_for(settings)
    offload = Offload(offload_workers)

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

    app = ServerApp(
        title="ExecuTorch/TensorRT model server",
        description="Deploy ExecuTorch programs (.pte + .ptd), checked at ingest, "
        "and run them on the native ExecuTorch host.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = service
    app.state.offload = offload
    infer_endpoint = http_routes.install(app)
    v2_routes.install(app)
    docs_page.install(app)
    # Outside the routes: nothing is read or routed for a request it denies.
    app.add_middleware(auth.TokenAuth, policy=policy)
    http_errors.install(app)

    def guarded(endpoint):
        # Without an inference token these paths check nothing: no layer to pass through.
        checked = auth.TokenAuth(endpoint, policy=policy) if policy.infer_token else endpoint
        return http_errors.UnexpectedErrors(checked)

    app.native_infer = guarded(infer_endpoint)
    app.v2_infer = guarded(v2_routes.infer_endpoint)
    return app
