"""Request bodies in, multi-part response bodies out, for large tensors.

A body is read into one buffer (binary inputs are numpy views of it, so it is the only copy of the
request's tensors), and refused with 413 as soon as it crosses the limit, declared or streamed.
With a declared Content-Length, a binary body is placed in its buffer so that the tensor data
after the JSON header starts on a 64-byte boundary: otherwise the header's arbitrary length would
leave inputs misaligned, and they would have to be copied. A response's binary outputs are sent
from the result arrays themselves in slices, so a 100 MB output is never joined into a second
100 MB string and no single send holds the event loop for long.
"""

from __future__ import annotations

import numpy as np
from fastapi import Request
from starlette.responses import Response

from service.errors import Invalid, too_large

_SLICE = 4 * 1024 * 1024
ALIGNMENT = 64


async def read_body(
    request: Request, limit: int, what: str, align_at: int | None = None
) -> bytearray | memoryview:
    """The whole body; with `align_at`, a view whose byte `align_at` is 64-byte aligned where the
    length is declared."""
    declared = request.headers.get("content-length")
    declared = int(declared) if declared is not None and declared.isdigit() else None
    if declared is not None and declared > limit:
        raise too_large(what, limit)
    if declared is None or align_at is None:
        body = bytearray()
        async for chunk in request.stream():
            if len(body) + len(chunk) > limit:
                raise too_large(what, limit)
            body += chunk
        return body
    buffer = bytearray(declared + ALIGNMENT)  # zero pages: no cost until written
    start = -(np.frombuffer(buffer, np.uint8).ctypes.data + align_at) % ALIGNMENT
    body = memoryview(buffer)[start : start + declared]
    filled = 0
    async for chunk in request.stream():
        if filled + len(chunk) > declared:
            raise Invalid(f"{what} is longer than its Content-Length")
        body[filled : filled + len(chunk)] = chunk
        filled += len(chunk)
    if filled != declared:
        raise Invalid(f"{what} is shorter than its Content-Length")
    return body


class PartsResponse(Response):
    """A response whose body is several byte buffers (bytes or memoryviews), sent in turn."""

    def __init__(self, parts: list, media_type: str, headers: dict):
        self.parts = parts
        super().__init__(b"", media_type=media_type, headers=headers)
        length = sum(memoryview(part).nbytes for part in parts)
        self.headers["content-length"] = str(length)

    async def __call__(self, scope, receive, send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        for part in self.parts:
            view = memoryview(part)
            for start in range(0, view.nbytes, _SLICE):
                await send(
                    {
                        "type": "http.response.body",
                        "body": bytes(view[start : start + _SLICE]),
                        "more_body": True,
                    }
                )
        await send({"type": "http.response.body", "body": b"", "more_body": False})
