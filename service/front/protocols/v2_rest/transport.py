"""Request bodies in, multi-part response bodies out, for large tensors.

A body is read into one buffer (binary inputs are numpy views of it, so it is the only copy of
the request's tensors) by service/front/protocols/bodies.py, which refuses it with 413 as soon as it
crosses the limit, declared or streamed. With a declared Content-Length, a binary body goes
into memory the dataplane gives for it (in a front process, a slot of the arena the engine
reads: service/shared/arena.py), placed so that the tensor data after the JSON header starts on a
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

import asyncio
from collections.abc import Callable

import numpy as np

from service.errors import Invalid, too_large
from service.front.protocols.arriving import ArrivingBodies
from service.front.protocols.bodies import (
    BODY_INTO,
    answer_headers,
    chunks,
    declared_length,
    read_body,
    respond,
)

_SLICE = 4 * 1024 * 1024
# Up to this many bytes, an answer's parts are joined and sent in one body message.
JOIN_BELOW = 64 * 1024
# A body this small arrives in one message and is taken as it came: its tensors are copied into
# the slot that the engine client takes for the outputs anyway, which costs less than a second
# slot (and the transport's sink) would.
SMALL_BODY = 64 * 1024
# The memory a body's first bytes take (read_aligned_body grows it as more arrive).
FIRST_STEP = 1024 * 1024
# What it copies on the event loop when it grows; more is copied in a thread.
COPY_INLINE_BELOW = 1024 * 1024


def _copy(into, source, nbytes: int) -> None:
    """numpy's copy lets go of the GIL (a memoryview's does not), so the loop runs meanwhile."""
    np.frombuffer(into, np.uint8, nbytes)[:] = np.frombuffer(source, np.uint8, nbytes)


async def read_aligned_body(
    scope: dict,
    receive,
    limit: int,
    what: str,
    align_at: int | None,
    memory: Callable,
    arriving: ArrivingBodies | None = None,
):
    """(body, lease): the body in memory from `memory(nbytes, align_at)`, which gives a view
    whose byte `align_at` lies on a 256-byte boundary, and the lease that holds it (None: plain
    memory). Without a declared length, when `align_at` is past it, or for a SMALL_BODY, the
    body is read as read_body does.

    The memory follows the bytes that arrived, not the length declared: it is first taken once
    the header is in (FIRST_STEP, or twice what came), and taken again twice as large (what came
    copied over) whenever the body outgrows it, up to the declared length. So a client that
    declares 256 MiB and sends its head holds a megabyte of the arena, and one that sends the
    whole body costs at most one extra copy of it. `arriving` caps what one client address
    holds so (Busy past it)."""
    declared = declared_length(scope)
    if declared is None or align_at is None or align_at > declared or declared <= SMALL_BODY:
        return await read_body(scope, receive, limit, what), None
    if declared > limit:
        raise too_large(what, limit)
    client = (scope.get("client") or ("", 0))[0]
    into = scope.get("extensions", {}).get(BODY_INTO)
    head, body, lease, filled, sink, held = bytearray(), None, None, 0, None, 0

    async def grow(need: int) -> None:
        """Memory for at least `need` bytes, what came so far copied into it (in a thread when
        large: the event loop answers health probes meanwhile)."""
        nonlocal body, lease, held
        size = min(declared, max(need, 2 * held, FIRST_STEP))
        if arriving is not None:
            arriving.hold(client, size - held)
        try:
            grown, grown_lease = memory(size, align_at)
        except BaseException:
            if arriving is not None:
                arriving.drop(client, size - held)
            raise
        if body is not None and filled > COPY_INLINE_BELOW:
            await asyncio.to_thread(_copy, grown, body, filled)
        elif body is not None:
            grown[:filled] = body[:filled]
        if lease is not None:
            lease.release()
        body, lease, held = grown, grown_lease, size

    try:
        async for chunk in chunks(receive):
            if body is None:
                if head or len(chunk) < align_at:  # gathered until the header is whole
                    head += chunk
                    if len(head) < align_at and len(head) < declared:
                        continue
                    chunk = head
                await grow(len(chunk))
                head = None
            elif sink is not None:  # the transport filled the room: what came is in `body`
                filled = sink.filled
                sink.detach()
                sink = None
            if filled + len(chunk) > declared:
                raise Invalid(f"{what} is longer than its Content-Length")
            if filled + len(chunk) > held:
                await grow(filled + len(chunk))
            body[filled : filled + len(chunk)] = chunk
            filled += len(chunk)
            if into is not None and filled < held:  # the rest goes straight into the room
                sink = into(scope, body, filled)
        if body is None:  # it ended before its header did (or it is empty)
            body, filled = head, len(head)
        elif sink is not None:
            filled = sink.filled
            sink.detach()
            sink = None
        if filled != declared:
            raise Invalid(f"{what} is shorter than its Content-Length")
    except BaseException:
        if sink is not None:
            sink.detach()
        if lease is not None:
            lease.release()
        raise
    finally:
        if arriving is not None:
            arriving.drop(client, held)
    return body, lease


async def send_parts(
    scope: dict, send, media_type: bytes, headers: list, parts: list, on_sent: Callable | None
) -> None:
    """A 200 whose body is `parts` (bytes or memoryviews) in turn; `on_sent` frees what they
    view once they are sent or abandoned."""
    try:
        length = sum(memoryview(part).nbytes for part in parts)
        if length <= JOIN_BELOW:
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            await respond(scope, send, media_type, headers, bytes(body))
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": answer_headers(media_type, headers, length),
            }
        )
        for part in parts:
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
        parts.clear()
        if on_sent is not None:
            on_sent()
