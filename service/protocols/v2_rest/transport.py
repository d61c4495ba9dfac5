"""Request bodies in, multi-part response bodies out, for large tensors.

A body is read into one buffer sized from Content-Length (binary inputs are numpy views of it, so
it is the only copy of the request's tensors), and refused with 413 as soon as it crosses the
limit, declared or streamed. A response's binary outputs are sent from the result arrays
themselves in slices, so a 100 MB output is never joined into a second 100 MB string and no
single send holds the event loop for long.
"""
from __future__ import annotations

from fastapi import Request
from starlette.responses import Response

from service.errors import Problem, TooLarge

_SLICE = 4 * 1024 * 1024


def _too_large(limit: int, what: str) -> TooLarge:
    message = f"{what} is larger than the limit of {limit} bytes"
    return TooLarge(message, [Problem(None, "request.too_large", message)])


async def read_body(request: Request, limit: int, what: str) -> bytearray:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit, what)
    body = bytearray()
    async for chunk in request.stream():
        if len(body) + len(chunk) > limit:
            raise _too_large(limit, what)
        body += chunk
    return body


class PartsResponse(Response):
    """A response whose body is several byte buffers (bytes or memoryviews), sent in turn."""

    def __init__(self, parts: list, media_type: str, headers: dict):
        self.parts = parts
        super().__init__(b"", media_type=media_type, headers=headers)
        length = sum(memoryview(part).nbytes for part in parts)
        self.headers["content-length"] = str(length)

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": self.status_code,
                    "headers": self.raw_headers})
        for part in self.parts:
            view = memoryview(part)
            for start in range(0, view.nbytes, _SLICE):
                await send({"type": "http.response.body",
                            "body": bytes(view[start:start + _SLICE]), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
