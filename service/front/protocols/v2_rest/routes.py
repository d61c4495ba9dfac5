"""The Open Inference Protocol's REST endpoints under /v2, thin over the ModelService dataplane.

Each route translates the protocol's JSON (and binary tensor data) into dataplane calls; errors
become this protocol's codes in V2Route. Large bodies are decoded away from the event loop
(offload.py says why threads are not enough for JSON), so health probes keep answering while a
100 MB request is decoded.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from service.dataplane.service import ModelService
from service.errors import Unavailable, clip
from service.front.protocols.fast_routes import FastRoute
from service.front.protocols.http_errors import responses
from service.front.protocols.v2_rest import infer_endpoint, metadata, repository, shared_memory
from service.front.protocols.v2_rest.errors import V2Route, unmatched
from service.front.protocols.v2_rest.schema import (
    ANSWERS,
    INFER_ANSWERS,
    INFER_BODY,
    MODEL_ANSWERS,
    READY_ANSWERS,
    SERVER_READY_ANSWERS,
)

TAG = "v2 (Open Inference Protocol)"
router = APIRouter(prefix="/v2", route_class=V2Route, tags=[TAG])


def _service(request: Request) -> ModelService:
    return request.app.state.service


@router.get("", responses=ANSWERS)
async def server_metadata() -> dict:
    return await asyncio.to_thread(metadata.server_metadata)


@router.get("/health/live", responses=responses(500))
async def live() -> dict:
    return {"live": True}


@router.get("/health/ready", responses=SERVER_READY_ANSWERS)
async def ready(request: Request) -> JSONResponse:
    is_ready = _service(request).ready
    return JSONResponse(
        {"ready": is_ready}
        if is_ready
        else {"ready": False, "error": _service(request).not_ready_reason()},
        status_code=200 if is_ready else 503,
    )


@router.get("/models/stats", responses=ANSWERS)
async def all_stats(request: Request) -> dict:
    return {"model_stats": await _service(request).model_stats(None)}


@router.get("/models/{model}/stats", responses=MODEL_ANSWERS)
@router.get("/models/{model}/versions/{version}/stats", responses=MODEL_ANSWERS)
async def model_stats(request: Request, model: str, version: str | None = None) -> dict:
    # 404 for an unknown model or version
    return {"model_stats": await _service(request).model_stats(model, version)}


@router.get("/models/{model}", responses=MODEL_ANSWERS)
@router.get("/models/{model}/versions/{version}", responses=MODEL_ANSWERS)
async def model_metadata(request: Request, model: str, version: str | None = None) -> dict:
    return await metadata.model_metadata(_service(request), model, version)


@router.get("/models/{model}/config", responses=MODEL_ANSWERS)
@router.get("/models/{model}/versions/{version}/config", responses=MODEL_ANSWERS)
async def model_config(request: Request, model: str, version: str | None = None) -> dict:
    """Triton's ModelConfig of the model (service.dataplane.triton_config)."""
    return await _service(request).model_config(model, version)


@router.get("/models/{model}/ready", responses=READY_ANSWERS)
@router.get("/models/{model}/versions/{version}/ready", responses=READY_ANSWERS)
async def model_ready(request: Request, model: str, version: str | None = None) -> dict:
    if not await _service(request).model_ready(model, version):
        raise Unavailable(f"model {clip(model)!r} is not ready")
    return {"name": model, "ready": True}


# What OpenAPI shows of the two inference routes (fast routes: infer_endpoint.py serves them).
def _describes_infer(model: str) -> Response:
    """Runs the model on JSON tensors, or binary ones after a JSON header."""
    raise NotImplementedError


def _describes_versioned_infer(model: str, version: str) -> Response:
    """Runs that version of the model, as /v2/models/{model}/infer."""
    raise NotImplementedError


FAST_ROUTES = [
    FastRoute(
        path,
        infer_endpoint.infer_endpoint,
        doc,
        name,
        responses=INFER_ANSWERS,
        openapi_extra=INFER_BODY,
        tags=(TAG,),
    )
    for path, doc, name in (
        ("/v2/models/{model}/infer", _describes_infer, "infer"),
        (
            "/v2/models/{model}/versions/{version}/infer",
            _describes_versioned_infer,
            "infer_version",
        ),
    )
]


_ALL_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


def install(app: FastAPI) -> None:
    """Mounts /v2 on the app (whose state holds the shared `offload`)."""
    app.include_router(router)
    app.include_router(repository.router)
    app.include_router(shared_memory.router)
    # Last, so only paths under /v2 that no route has (or wrong methods) reach them.
    for path in ("/v2", "/v2/{rest:path}"):
        app.add_api_route(path, unmatched, include_in_schema=False, methods=_ALL_METHODS)
