"""HTTP routes: thin translations between requests and the ModelService dataplane.

Every ServiceError becomes a status code through http_errors.service_error_response, with one
error body shape, {"error": ..., "problems": [...]}, for every 4xx the API returns, including
request validation.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse

from service import rules
from service.dataplane.service import ModelService
from service.errors import (
    ServiceError,
)
from service.front.protocols import health
from service.front.protocols.fast_routes import FastRoute
from service.front.protocols.http_errors import AUTH, responses, service_error_response
from service.front.protocols.native import infer_endpoint
from service.front.protocols.native.multipart import receive_upload
from service.front.protocols.native.schema import (
    HealthBody,
    InferRequest,
    InferResponse,
    ModelDescription,
)
from service.ingest.receive import receive_and_deploy
from service.prometheus import CONTENT_TYPE as METRICS_CONTENT_TYPE

# Every status each route can answer besides its success (401/403 from the token check, 500
# for the server's own faults); http_errors answers 404/405 for paths and methods no route has.
_ANY = (*AUTH, 500)
_DEPLOY_ERRORS = responses(*_ANY, 409, 413, 422, 503, 507)
_MODEL_ERRORS = responses(*_ANY, 404)
_INFER_ERRORS = responses(*_ANY, 404, 413, 422, 503, 504)
_UPLOAD_FORM = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["name", "program"],
                    "properties": {
                        "name": {"type": "string", "description": "model name"},
                        "program": {
                            "type": "string",
                            "format": "binary",
                            "description": "the .pte program",
                        },
                        "data": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "description": "the program's .ptd data files",
                        },
                        "replace": {
                            "type": "boolean",
                            "description": "replace an existing model (its newest version, or "
                            "the version given) atomically",
                        },
                        "version": {
                            "type": "integer",
                            "description": "the model version to store this as (default: 1 "
                            "for a new model; with replace, the newest version)",
                        },
                        "config": {
                            "type": "string",
                            "description": "model configuration, JSON with Triton's "
                            "names: max_batch_size, dynamic_batching, instance_group",
                        },
                    },
                }
            }
        },
    }
}

router = APIRouter()


def _service(request: Request) -> ModelService:
    return request.app.state.service


@router.post(
    "/models",
    status_code=201,
    response_model=ModelDescription,
    responses=_DEPLOY_ERRORS,
    openapi_extra=_UPLOAD_FORM,
)
async def deploy_model(request: Request, replace: bool = Query(False)) -> dict:
    service = _service(request)
    return await receive_and_deploy(
        service,
        lambda: receive_upload(
            request, service.begin_staging, service.settings.max_upload_bytes, replace
        ),
    )


@router.get("/models", response_model=list[ModelDescription], responses=responses(*_ANY))
async def list_models(request: Request) -> list[dict]:
    return await _service(request).list_models()


@router.get("/models/{name}", response_model=ModelDescription, responses=_MODEL_ERRORS)
@router.get(
    "/models/{name}/versions/{version}", response_model=ModelDescription, responses=_MODEL_ERRORS
)
async def describe_model(request: Request, name: str, version: str | None = None) -> dict:
    """Of one version, or of the default one (the highest served); `versions` lists all."""
    return await _service(request).describe(name, version)


@router.delete("/models/{name}", status_code=204, responses=_MODEL_ERRORS)
@router.delete("/models/{name}/versions/{version}", status_code=204, responses=_MODEL_ERRORS)
async def delete_model(request: Request, name: str, version: str | None = None) -> Response:
    """The whole model, or one version (the version policy then serves from the others)."""
    await _service(request).delete(name, version)
    return Response(status_code=204)


def _describes_infer(body: InferRequest) -> InferResponse:
    """Runs a method of a model (default forward) on JSON tensors."""
    raise NotImplementedError


@router.get("/health/live", response_model=HealthBody)
async def live() -> JSONResponse:
    # As the inline probe answers it: no `error` key when there is nothing to say.
    return JSONResponse(health.answer("/health/live", True)[1])


@router.get("/health/ready", response_model=HealthBody, responses={503: {"model": HealthBody}})
async def ready(request: Request) -> JSONResponse:
    service = _service(request)
    status, body = health.answer("/health/ready", service.ready, service.not_ready_reason)
    return JSONResponse(body, status_code=status)


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request) -> Response:
    """Prometheus text exposition format."""
    return Response(await _service(request).metrics_text(), media_type=METRICS_CONTENT_TYPE)


async def _service_error(_: Request, exc: ServiceError) -> JSONResponse:
    return service_error_response(exc)


async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    problems = []
    for error in exc.errors():
        location = [str(part) for part in error.get("loc", ()) if part != "body"]
        where = None
        if len(location) >= 2 and location[0] == "inputs":
            where = f"input_{location[1]}"
        problems.append(
            {
                "file": None,
                "rule": rules.REQUEST_INVALID,
                "input": where,
                "message": f"{'.'.join(location) or 'body'}: {error.get('msg')}",
            }
        )
    return JSONResponse({"error": "invalid request", "problems": problems}, status_code=422)


def install(app: FastAPI) -> FastRoute:
    """Adds the routes; returns POST /infer's declaration for the app's fast routes."""
    endpoint = infer_endpoint.InferEndpoint(app.state.service, app.state.offload)
    app.include_router(router)
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    return FastRoute("/infer", endpoint, _describes_infer, "infer", responses=_INFER_ERRORS)
