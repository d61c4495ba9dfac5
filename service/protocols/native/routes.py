"""HTTP routes: thin translations between requests and the ModelService dataplane.

Every ServiceError becomes a status code here and only here (STATUS), with one error body shape,
{"error": ..., "problems": [...]}, for every 4xx the API returns, including request validation.
"""
from __future__ import annotations

from fastapi import APIRouter, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse

from service.dataplane.service import ModelService
from service.dataplane.types import InferRequest as DataplaneRequest
from service.dataplane.types import Tensor
from service.errors import (Busy, Conflict, DeadlineExceeded, ExecutionFailed, Forbidden, Invalid,
                            NotFound, ServiceError, TooLarge, Unauthorized, Unavailable,
                            clip, input_problem)
from service.protocols import json_tensors
from service.protocols.native.schema import (ErrorBody, HealthBody, InferRequest, InferResponse,
                                 ModelDescription)
from service.protocols.native.multipart import receive_upload
from service.dataplane.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE

STATUS = {NotFound: 404, Conflict: 409, Invalid: 422, TooLarge: 413, Unavailable: 503,
          Busy: 503, DeadlineExceeded: 504, Unauthorized: 401, Forbidden: 403,
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
        lambda: receive_upload(request, service.begin_staging, service.settings.max_upload_bytes,
                               replace))


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


def _decode(index: int, item) -> Tensor:
    label = clip(item.name) if item.name is not None else f"input_{index}"
    try:
        array = json_tensors.decode(item.datatype, item.shape, item.data, label)
    except json_tensors.CodecError as exc:
        raise input_problem(label, "input.data", str(exc)) from None
    return Tensor(item.name, item.datatype, array)


@router.post("/infer", response_model=InferResponse, responses=_ERRORS)
async def infer(request: Request, body: InferRequest) -> dict:
    tensors = [_decode(index, item) for index, item in enumerate(body.inputs)]
    response = await _service(request).infer(
        DataplaneRequest(model=body.model, method=body.method, inputs=tensors))
    return {"model": response.model, "method": response.method,
            "outputs": [json_tensors.encode(t.array, t.name, t.datatype)
                        for t in response.outputs]}


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
            where = f"input_{location[1]}"
        problems.append({"file": None, "rule": "request.invalid", "input": where,
                         "message": f"{'.'.join(location) or 'body'}: {error.get('msg')}"})
    return JSONResponse({"error": "invalid request", "problems": problems}, status_code=422)


def install(app: FastAPI) -> None:
    app.include_router(router)
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
