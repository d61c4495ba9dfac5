"""The health routes' answers, and those answers given where a probe's bytes arrive.

Under an inference flood a front's event loop runs many callbacks per turn, and a request taken
through uvicorn's request cycle and FastAPI waits several turns (parsed, its task started, its
answer flushed at the end of a turn) besides FastAPI's own work: measured on 2 cores, the
readiness probe's p99 was 240 ms while refusals were being answered (issue 34 asks <= 50 ms:
a probe must never wait behind inference work). So a probe that arrives whole on an idle
connection is answered in the same callback that read it (http_transport.py), from the same
answers the routes give (`answer`); anything else about it (a body, `Connection`, pipelining)
goes the usual way, to the routes.

A bare `GET /metrics` is answered the same way when the front holds a recent page of the
engine's (EngineClient.recent_metrics: the front is busy and the page young enough) and the page
needs no token; otherwise the route asks the engine.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.responses import JSONResponse, Response

from service.prometheus import CONTENT_TYPE as METRICS_CONTENT_TYPE

# path -> its answer (status, body), from whether the server is ready and why not
_ANSWERS: dict[str, Callable[[bool, Callable[[], str]], tuple[int, dict]]] = {
    "/v2/health/live": lambda ready, why: (200, {"live": True}),
    "/v2/health/ready": lambda ready, why: (
        (200, {"ready": True}) if ready else (503, {"ready": False, "error": why()})
    ),
    "/health/live": lambda ready, why: (200, {"status": "live"}),
    "/health/ready": lambda ready, why: (
        (200, {"status": "ready"}) if ready else (503, {"status": "starting", "error": why()})
    ),
}
_REASONS = {200: b"OK", 503: b"Service Unavailable"}
METRICS_PATH = "/metrics"
# Headers that make a request more than a bare probe: the routes serve those.
_NOT_BARE = (b"content-length", b"transfer-encoding", b"connection", b"expect", b"upgrade")


def answer(path: str, ready: bool, why: Callable[[], str] = str) -> tuple[int, dict]:
    """(status, JSON body) of health route `path`, for the routes and the inline answers;
    `why()` says why the server is not ready (asked only then)."""
    return _ANSWERS[path](ready, why)


class InlineProbes:
    """Answers bare health probes at once: `respond(data, default_headers)` gives the whole
    HTTP answer to `data` if it is exactly one such probe, else None. `service`: what the
    routes read readiness from (its `ready` and `not_ready_reason()`); `metrics`: the recent
    /metrics page or None (None: scrapes go to the route)."""

    def __init__(self, service, metrics: Callable[[], str | None] | None = None):
        self._service = service
        self._metrics = metrics
        self._heads = {f"GET {path} HTTP/1.1\r\n".encode(): path for path in _ANSWERS}
        if metrics is not None:
            self._heads[b"GET /metrics HTTP/1.1\r\n"] = METRICS_PATH

    def respond(self, data: bytes, default_headers: list) -> bytes | None:
        if not data.startswith(b"GET ") or not data.endswith(b"\r\n\r\n"):
            return None
        line_end = data.find(b"\r\n") + 2
        path = self._heads.get(data[:line_end])
        if path is None or data.find(b"\r\n\r\n") != len(data) - 4:
            return None  # another route, or more than one request
        headers = data[line_end:].lower()
        if any(b"\n" + name + b":" in b"\n" + headers for name in _NOT_BARE):
            return None
        if path == METRICS_PATH:
            page = self._metrics()
            if page is None:
                return None
            response = Response(page, media_type=METRICS_CONTENT_TYPE)
        else:
            service = self._service
            status, body = answer(path, service.ready, service.not_ready_reason)
            response = JSONResponse(body, status_code=status)
        # The routes' own response classes make the body and its headers, so that an answer
        # given here has the routes' bytes (uvicorn's default headers first, as it writes them).
        status = response.status_code
        parts = [b"HTTP/1.1 ", str(status).encode(), b" ", _REASONS[status], b"\r\n"]
        for name, value in (*default_headers, *response.raw_headers):
            parts += (name, b": ", value, b"\r\n")
        parts += (b"\r\n", response.body)
        return b"".join(parts)
