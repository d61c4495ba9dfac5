"""Request bodies in, multi-part response bodies out, for large tensors.

A body is read into one buffer (binary inputs are numpy views of it, so it is the only copy of
the request's tensors) by service/protocols/bodies.py, which refuses it with 413 as soon as it
crosses the limit, declared or streamed. With a declared Content-Length, a binary body goes
into memory the dataplane gives for it (in a front process, a slot of the arena the engine
reads: service/ipc/arena.py), placed so that the tensor data after the JSON header starts on a
256-byte boundary: otherwise the header's arbitrary length would leave inputs misaligned, and
they would have to be copied (TensorRT takes no buffer off that boundary). Arena pages cost
memory only once written, so a request that declares a large body and sends little costs
little. In a front, the chunks that arrive once the slot is taken are written into it by the
HTTP transport itself (bodies.BODY_INTO): one copy per byte, no message per chunk. A response's
binary outputs are sent from the result arrays themselves in slices, so a
100 MB output is never joined into a second 100 MB string and no single send holds the event
loop for long.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from fastapi import Request
from starlette.responses import Response

from service.errors import Invalid, too_large
from service.protocols.bodies import BODY_INTO, chunks, declared_length, read_body

_SLICE = 4 * 1024 * 1024
ALIGNMENT = 256


async def read_aligned_body(
    request: Request, limit: int, what: str, align_at: int | None, memory: Callable
) -> tuple[bytearray | memoryview, object | None]:
    """(the whole body, the lease of the memory it is in or None); where the length is declared,
    byte `align_at` of it is 256-byte aligned, in memory from `memory(nbytes)` -> (view, lease).

    That memory is taken only once the JSON header (the first `align_at` bytes) has arrived: a
    client that declares a large body and then sends nothing holds none of it."""
    declared = declared_length(request.scope)
    if declared is None or align_at is None or align_at > declared:
        return await read_body(request.scope, request.receive, limit, what), None
    if declared > limit:
        raise too_large(what, limit)
    into = request.scope.get("extensions", {}).get(BODY_INTO)
    head, body, lease, filled, sink = bytearray(), None, None, 0, None
    try:
        async for chunk in chunks(request.receive):
            if body is None:
                head += chunk
                if len(head) < align_at and len(head) < declared:
                    continue
                buffer, lease = memory(declared + ALIGNMENT)
                start = -(np.frombuffer(buffer, np.uint8).ctypes.data + align_at) % ALIGNMENT
                body = buffer[start : start + declared]
                chunk, head = head, None
            if sink is not None or filled + len(chunk) > declared:
                raise Invalid(f"{what} is longer than its Content-Length")
            body[filled : filled + len(chunk)] = chunk
            filled += len(chunk)
            if into is not None:  # the rest goes straight into the slot (bodies.BODY_INTO)
                sink = into(request.scope, body, filled)
                into = None
        if body is None:  # it ended before its header did (or it is empty)
            body, filled = head, len(head)
        elif sink is not None:
            filled = sink.filled
            sink.detach()
        if filled != declared:
            raise Invalid(f"{what} is shorter than its Content-Length")
    except BaseException:
        if sink is not None:
            sink.detach()
        if lease is not None:
            lease.release()
        raise
    return body, lease


class PartsResponse(Response):
    """A response whose body is several byte buffers (bytes or memoryviews), sent in turn."""

    def __init__(self, parts: list, media_type: str, headers: dict, on_sent: Callable):
        self.parts = parts
        self.on_sent = on_sent  # frees what the parts view, once they are sent or abandoned
        super().__init__(b"", media_type=media_type, headers=headers)
        length = sum(memoryview(part).nbytes for part in parts)
        self.headers["content-length"] = str(length)

    async def __call__(self, scope, receive, send) -> None:
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
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
        finally:
            self.parts = []
            self.on_sent()
