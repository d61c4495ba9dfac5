"""Status codes and the `{"error": ...}` body for everything answered under /v2.

Triton and KServe clients read the message from the body's "error" key and fail with "decoding
the response: 'error'" on anything else, so every non-2xx under /v2 has that shape: dataplane
errors, malformed requests, bugs, unknown paths and wrong methods. The route class catches inside
each v2 route, so the native API keeps its own codes (it answers 422 where this protocol says
400) from the app-level handlers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect

from service import rules
from service.errors import (
    ServiceError,
    clip,
)
from service.front.protocols import http_errors
from service.front.protocols.disconnect import ClientDisconnected


def error_response(
    status: int, message: str, problems: list | None = None, headers: dict | None = None
) -> JSONResponse:
    return http_errors.ErrorResponse(
        {"error": message, "problems": problems or []}, status_code=status, headers=headers
    )


def service_error_response(exc: ServiceError) -> JSONResponse:
    return http_errors.service_error_response(exc, invalid_status=400)


async def guarded(handler: Callable[[Request], Awaitable[Response]], request: Request) -> Response:
    """What `handler` answers, or its error in this protocol's codes and shape."""
    try:
        return await handler(request)
    except ServiceError as exc:
        return service_error_response(exc)
    except RequestValidationError as exc:
        problems = [
            {
                "file": None,
                "rule": rules.REQUEST_INVALID,
                "message": f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg')}",
            }
            for e in exc.errors()
        ]
        return error_response(400, "invalid request", problems)
    except (ClientDisconnect, ClientDisconnected):
        raise  # nobody reads an answer; http_errors.UnexpectedErrors logs it
    except Exception:
        what = f"{request.method} {clip(request.url.path)} failed"
        return http_errors.internal_error_response(what, exc_info=True)


class V2Route(APIRoute):
    """A route whose errors are answered in this protocol's codes and shape."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def route_handler(request: Request) -> Response:
            return await guarded(handler, request)

        return route_handler


def unmatched(request: Request) -> JSONResponse:
    """404 for a path no v2 route has, 405 (with Allow) for a known path and a wrong method."""
    allowed = http_errors.allowed_methods(request.app, request.url.path)
    path = clip(request.url.path)
    if allowed:
        return error_response(
            405,
            f"method {request.method} is not allowed on {path}; use {', '.join(allowed)}",
            headers={"Allow": ", ".join(allowed)},
        )
    return error_response(404, f"no such endpoint: {request.method} {path}")
