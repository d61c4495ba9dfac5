"""HTTP error answers, in the one error shape {"error", "problems"}, for every HTTP protocol.

ServiceErrors become statuses here (service_error_response, called by each protocol's routes).
So are the answers no route writes itself: unknown paths and wrong methods (Starlette's own
HTTPException), the server's own faults, and clients that go away mid-request. An unexpected
exception is answered 500 here instead of escaping to the ASGI server, because uvicorn closes the
keep-alive connection of a request whose application raised; a client must be able to go on
using its connection after any answer, 500 included.

It also keeps client strings out of the access log whole: uvicorn logs the request path, which
can carry a name of any length.
"""

from __future__ import annotations

import functools
import json
import logging
import re

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import compile_path

from service import rules
from service.errors import (
    Busy,
    Conflict,
    DeadlineExceeded,
    DeviceMemoryFull,
    ExecutionFailed,
    Forbidden,
    Invalid,
    NotFound,
    ServiceError,
    TooLarge,
    Unauthorized,
    Unavailable,
    clip,
    error_id,
    retry_after_seconds,
)
from service.front.protocols.disconnect import ClientDisconnected, log_aborted

log = logging.getLogger(__name__)


class ProblemModel(BaseModel):
    file: str | None = Field(None, description="the uploaded file the problem is about, if any")
    rule: str = Field(description="stable rule id, e.g. data.characters")
    message: str
    input: str | None = Field(None, description="the request input the problem is about, if any")


class ErrorBody(BaseModel):
    """The one error shape of every HTTP protocol, as OpenAPI documents it."""

    error: str
    problems: list[ProblemModel] = []


_DESCRIPTIONS = {
    400: "Bad request",
    401: "No credentials, or wrong ones",
    403: "Credentials without the needed scope",
    404: "Unknown model, method or tensor",
    405: "Method not allowed on this path",
    409: "The model exists (send replace=true)",
    413: "A size or count limit was crossed",
    422: "Refused: every problem is named in `problems`",
    500: "The server's own fault",
    503: "The model cannot serve now, or the server is not ready",
    507: "The model needs more GPU memory than is free (rule load.device_memory)",
    504: "The request's deadline passed before it ran",
}
# Tokens are checked on every model and inference route (service/auth.py), so every one of them
# can answer 401 and 403; a route's own table lists what else it can answer.
AUTH = (401, 403)
_RULES = {404: rules.REQUEST_ROUTE, 405: rules.REQUEST_METHOD}


# HTTP status per kind of ServiceError, for every HTTP protocol of the app; a refused request
# (Invalid) is 422 on the server's own API and 400 in the Open Inference Protocol (Triton's
# invalid argument), so service_error_response takes that one from its caller.
STATUS = {
    NotFound: 404,
    Conflict: 409,
    TooLarge: 413,
    DeviceMemoryFull: 507,
    Unavailable: 503,
    Busy: 503,
    DeadlineExceeded: 504,
    Unauthorized: 401,
    Forbidden: 403,
    ExecutionFailed: 500,
}


class ErrorResponse(JSONResponse):
    """A JSON error answer that can always be written: messages echo client strings, and one
    decoded from JSON may hold a lone surrogate, which UTF-8 cannot encode (it becomes U+FFFD
    here rather than a second fault while answering the first)."""

    def render(self, content) -> bytes:
        return json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode(
            "utf-8", "replace"
        )


def service_error_response(exc: ServiceError, invalid_status: int = 422) -> JSONResponse:
    """The error in the shared body shape, with Retry-After when the model is busy."""
    if isinstance(exc, Invalid):
        status = invalid_status
    else:
        status = next(code for kind, code in STATUS.items() if isinstance(exc, kind))
    headers = {"Retry-After": str(retry_after_seconds(exc))} if isinstance(exc, Busy) else None
    return ErrorResponse(
        {"error": exc.message, "problems": [p.as_dict() for p in exc.problems]},
        status_code=status,
        headers=headers,
    )


def responses(*codes: int) -> dict:
    """OpenAPI `responses` for the given error statuses, each with the shared error body."""
    return {
        code: {"model": ErrorBody, "description": _DESCRIPTIONS[code]}
        for code in sorted(set(codes))
    }


def error_body(message: str, rule: str) -> dict:
    return {"error": message, "problems": [{"file": None, "rule": rule, "message": message}]}


def internal_error_response(what: str, exc_info=None) -> JSONResponse:
    """The one answer to a fault of the server's own, on every HTTP route: its cause logged at
    ERROR (with `exc_info`'s traceback) under an id the answer carries, never the cause itself,
    which may hold the server's paths or data."""
    ident = error_id()
    log.error("server fault (error id %s): %s", ident, what, exc_info=exc_info)
    return ErrorResponse(
        error_body(f"internal server error (error id {ident})", rules.SERVER_INTERNAL),
        status_code=500,
    )


@functools.cache
def _template(path: str) -> re.Pattern:
    return compile_path(path)[0]


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """Every method the OpenAPI schema documents on this path, for a 405's Allow. Starlette's
    own 405 names only the first route that matches the path, so GET and POST /models, two
    routes, said POST; the schema is also what clients (and schemathesis) compare Allow with."""
    return sorted(
        {
            method.upper()
            for template, operations in app.openapi().get("paths", {}).items()
            if _template(template).match(path)
            for method in operations
        }
    )


async def _http_exception(request: Request, exc: HTTPException) -> JSONResponse:
    path = clip(request.url.path)
    headers, status = exc.headers, exc.status_code
    if status in (404, 405):
        allowed = ", ".join(allowed_methods(request.app, request.url.path))
        # No router route has a fast route's path (service/front/protocols/fast_routes.py): the
        # schema's methods for it make the router's 404 a 405.
        status = 405 if allowed else status
    if status == 404:
        message = f"no route {request.method} {path}"
    elif status == 405:
        allowed = allowed or (headers or {}).get("Allow", "")
        headers = {**(headers or {}), "Allow": allowed}
        message = f"{request.method} is not allowed on {path}; allowed: {allowed}"
    else:
        message = clip(exc.detail)
    return ErrorResponse(
        error_body(message, _RULES.get(status, rules.REQUEST_HTTP)),
        status_code=status,
        headers=headers,
    )


class UnexpectedErrors:
    """Outermost app middleware: answers a server fault 500 in the error shape and keeps the
    connection; a client that disconnected is logged at INFO and gets no answer."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracked(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except (ClientDisconnect, ClientDisconnected):
            log_aborted(scope)
        except Exception:
            if started:  # half an answer is on the wire: only closing the connection is honest
                raise
            what = f"unexpected error serving {scope['method']} {clip(scope['path'])}"
            await internal_error_response(what, exc_info=True)(scope, receive, send)


class _ClipArguments(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(clip(a) if isinstance(a, str) else a for a in record.args)
        return True


def clip_access_log() -> None:
    """Called once uvicorn has configured its loggers (at app start)."""
    for name in ("uvicorn.access", "uvicorn.error"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _ClipArguments) for f in logger.filters):
            logger.addFilter(_ClipArguments())


def _schema_with_one_error_shape(app: FastAPI):
    """FastAPI documents request validation failures with its own `HTTPValidationError` body;
    this app answers them in the shared error shape (routes._validation_error), so the schema
    says that instead. A route that declares 400, and every route under /v2 (the Open Inference
    Protocol's: v2_rest/errors.py), answers malformed requests with 400, never
    with FastAPI's 422, so its 422 goes."""
    generate = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = generate()
            error_ref = {"$ref": "#/components/schemas/ErrorBody"}
            for path, operations in schema.get("paths", {}).items():
                for operation in operations.values():
                    if "400" in operation.get("responses", {}) or path.startswith("/v2"):
                        operation["responses"].pop("422", None)
                    invalid = operation.get("responses", {}).get("422", {})
                    for content in invalid.get("content", {}).values():
                        if (
                            content.get("schema", {})
                            .get("$ref", "")
                            .endswith("/HTTPValidationError")
                        ):
                            content["schema"] = error_ref
            components = schema.get("components", {}).get("schemas", {})
            components.pop("HTTPValidationError", None)
            components.pop("ValidationError", None)
            app.openapi_schema = schema
        return app.openapi_schema

    return openapi


def install(app: FastAPI) -> None:
    """After every other middleware, so that UnexpectedErrors is the outermost."""
    app.add_exception_handler(HTTPException, _http_exception)
    app.add_middleware(UnexpectedErrors)
    app.openapi = _schema_with_one_error_shape(app)
