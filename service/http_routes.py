"""HTTP routes: thin translations between requests and the ModelService dataplane.

Every ServiceError becomes a status code here and only here (STATUS), with one error body shape,
{"error": ..., "problems": [...]}, for every 4xx the API returns, including request validation.
"""
from __future__ import annotations

from fastapi import APIRouter, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse

from service.core import (Conflict, ExecutionFailed, Invalid, ModelService, NotFound, ServiceError,
                          TooLarge, Unavailable)
from service.http_models import (ErrorBody, HealthBody, InferRequest, InferResponse,
                                 ModelDescription)
from service.http_upload import receive_upload
from service.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE

STATUS = {NotFound: 404, Conflict: 409, Invalid: 422, TooLarge: 413, Unavailable: 503,
          ExecutionFailed: 500}
_ERRORS = {code: {"model": ErrorBody} for code in (404, 409, 413, 422, 503)}
_UPLOAD_FORM = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["name", "program"],
    "properties": {
        "name": {"type": "string", "description": "model name"},
        "program": {"type": "string", "format": "binary", "description": "the .pte program"},
        "data": {"type": "array", "items": {"type": "string", "format": "binary"},
                 "description": "the program's .ptd data files"},
        "replace": {"type": "boolean", "description": "replace an existing model atomically"},
    }}}}}}

router = APIRouter()


def _service(request: Request) -> ModelService:
    return request.app.state.service


@router.post("/models", status_code=201, response_model=ModelDescription, responses=_ERRORS,
             openapi_extra=_UPLOAD_FORM)
async def deploy_model(request: Request, replace: bool = Query(False)) -> dict:
    service = _service(request)
    return await service.deploy(
        lambda: receive_upload(request, service.storage, service.settings, replace))


@router.get("/models", response_model=list[ModelDescription])
async def list_models(request: Request) -> list[dict]:
    return _service(request).list_models()


@router.get("/models/{name}", response_model=ModelDescription, responses=_ERRORS)
async def describe_model(request: Request, name: str) -> dict:
    return _service(request).describe(name)


@router.delete("/models/{name}", status_code=204, responses=_ERRORS)
async def delete_model(request: Request, name: str) -> Response:
    await _service(request).delete(name)
    return Response(status_code=204)


@router.post("/infer", response_model=InferResponse, responses=_ERRORS)
async def infer(request: Request, body: InferRequest) -> dict:
    inputs = [item.model_dump() for item in body.inputs]
    return await _service(request).infer(body.model, body.method, inputs)


@router.get("/health/live", response_model=HealthBody)
async def live() -> dict:
    return {"status": "live"}


@router.get("/health/ready", response_model=HealthBody, responses={503: {"model": HealthBody}})
async def ready(request: Request) -> JSONResponse:
    is_ready = _service(request).ready
    return JSONResponse({"status": "ready" if is_ready else "starting"},
                        status_code=200 if is_ready else 503)


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> Response:
    """Prometheus text exposition format."""
    return Response(_service(request).metrics_text(), media_type=METRICS_CONTENT_TYPE)


async def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
    status = next(code for kind, code in STATUS.items() if isinstance(exc, kind))
    return JSONResponse({"error": exc.message, "problems": [p.as_dict() for p in exc.problems]},
                        status_code=status)


async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    problems = []
    for error in exc.errors():
        location = [str(part) for part in error.get("loc", ()) if part != "body"]
        where = None
        if len(location) >= 2 and location[0] == "inputs":
            where = f"input {location[1]}"
        problems.append({"file": None, "rule": "request.invalid", "input": where,
                         "message": f"{'.'.join(location) or 'body'}: {error.get('msg')}"})
    return JSONResponse({"error": "invalid request", "problems": problems}, status_code=422)


def install(app: FastAPI) -> None:
    app.include_router(router)
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
