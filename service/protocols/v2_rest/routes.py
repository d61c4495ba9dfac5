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
from service.errors import TooLarge, Unavailable, clip
from service.protocols.bodies import known_model, read_body, refuse_when_full
from service.protocols.fast_routes import FastRoute
from service.protocols.http_errors import responses
from service.protocols.offload import Offload
from service.protocols.v2_rest import binary, codec, metadata, repository, shared_memory
from service.protocols.v2_rest.errors import V2Route, guarded, unmatched
from service.protocols.v2_rest.schema import (
    ANSWERS,
    INFER_ANSWERS,
    INFER_BODY,
    MODEL_ANSWERS,
    READY_ANSWERS,
    SERVER_READY_ANSWERS,
)
from service.protocols.v2_rest.transport import PartsResponse, read_aligned_body

TAG = "v2 (Open Inference Protocol)"
router = APIRouter(prefix="/v2", route_class=V2Route, tags=[TAG])


def _service(request: Request) -> ModelService:
    return request.app.state.service


def _offload(request: Request) -> Offload:
    return request.app.state.offload


def _max_json(service: ModelService) -> int:
    """JSON bodies are bounded by their own limit and by the limit of every inference body."""
    return min(service.settings.max_json_bytes, service.settings.max_infer_bytes)


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
        else {"ready": False, "error": "the server is starting or stopping"},
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


def _header_length(text: str) -> int | None:
    """Where the binary data will start, to align it; None for a value split() will refuse."""
    text = text.strip()
    return int(text) if text.isascii() and text.isdigit() else None


async def infer(request: Request, model: str, version: str | None) -> Response:
    """Served by infer_endpoint (FAST_ROUTES), not by the router."""
    service, offload = _service(request), _offload(request)
    await known_model(service, model, version)  # an unknown one is answered before the body
    header_length = request.headers.get(binary.HEADER)
    refuse_when_full(service, model, version, codec.protocol(header_length))  # a full one too
    max_json = _max_json(service)
    # Without the header the body is JSON, whatever its Content-Type (tritonclient sends none).
    if header_length is None:
        body = await read_body(
            request.scope, request.receive, max_json, "a JSON inference request body"
        )
        lease = None
    else:
        body, lease = await read_aligned_body(
            request,
            service.settings.max_infer_bytes,
            "a binary inference request body",
            _header_length(header_length),
            service.body_buffer,
        )
    try:
        response, parsed = await _infer(
            service, offload, model, version, body, header_length, lease
        )
    finally:
        del body
        if lease is not None:
            lease.release()
    try:
        head, as_json, parts = codec.response_header(response, parsed)
        text = await offload.write(
            sum(tensor.array.size for _, tensor in as_json),
            codec.dump_response,
            head,
            [(i, t.array, t.datatype) for i, t in as_json],
        )
    except BaseException:
        response.release()
        raise
    if not parts:
        response.release()
        return Response(text, media_type="application/json")
    return PartsResponse(
        [text, *parts],
        "application/octet-stream",
        {binary.HEADER: str(len(text))},
        response.release,
    )


async def _infer(service, offload, model, version, body, header_length, lease):
    """(the dataplane's response, the parsed request): decoding and running, which may end while
    the body is still needed; the caller then frees the body and encodes the answer."""
    max_json = _max_json(service)
    header, payload = binary.split(body, header_length)
    if header.nbytes > max_json:
        raise TooLarge(f"the request's JSON header is larger than the limit of {max_json} bytes")
    text = body if payload is None else bytes(header)
    parsed = await offload.parse(codec.parse_header, text)
    del text, header
    dataplane_request = await offload.slice(
        0 if payload is None else payload.nbytes, codec.to_request, model, version, parsed, payload
    )
    dataplane_request.memory = lease
    if dataplane_request.shared_memory:
        service = shared_memory.engine_of(service)
    return await service.infer(dataplane_request), parsed


async def infer_endpoint(scope, receive, send) -> None:
    """The infer route as a bare ASGI app (service/protocols/fast_routes.py): the same error
    answers as the router's routes, without FastAPI's per-request work."""
    params = scope["path_params"]
    response = await guarded(
        lambda request: infer(request, params["model"], params.get("version")),
        Request(scope, receive),
    )
    await response(scope, receive, send)


# What OpenAPI shows of the two inference routes (fast routes: infer_endpoint serves them).
def _describes_infer(model: str) -> Response:
    """Runs the model on JSON tensors, or binary ones after a JSON header."""
    raise NotImplementedError


def _describes_versioned_infer(model: str, version: str) -> Response:
    """Runs that version of the model, as /v2/models/{model}/infer."""
    raise NotImplementedError


FAST_ROUTES = [
    FastRoute(
        path,
        infer_endpoint,
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
