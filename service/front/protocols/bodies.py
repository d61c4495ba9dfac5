"""The one reader of request bodies, for every HTTP protocol (bare endpoints and routes alike).

It works on the ASGI `receive` itself: the inference endpoints run without Starlette's Request
(fast_routes.py beside this says why), and a route's Request hands over the same callable.
A body is refused with 413 as soon as it crosses its limit, declared or streamed, and a client
that goes away mid-body raises ClientDisconnected (logged as aborted, never a server error).
The inference endpoints' whole answers leave through `respond`, which the fronts' transport can
write at once (RESPOND).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from service.errors import too_large
from service.front.protocols.disconnect import ClientDisconnected

Receive = Callable[[], Awaitable[dict]]

# An ASGI scope extension of the fronts' HTTP transport (service/front/protocols/http_transport.py):
# `scope["extensions"][BODY_INTO](scope, view, filled)` has the rest of the request's body written
# into `view` from byte `filled` on as it arrives, and returns the BodySink that counts it (None:
# read it as usual); receive() then only says when the body has ended. A large binary body lands
# in its arena slot in one copy, instead of being gathered into a buffer, copied into a message
# and copied again into the slot.
BODY_INTO = "etrt.body_into"
# Another: `scope["extensions"][RESPOND](scope, content_type, headers, body)` writes a whole 200
# answer (`headers`: lowercase (name, value) pairs besides its type and length) to the
# connection at once and returns True, or returns False when it cannot now (the connection is
# busy draining, closed, or access-logged): send it as ASGI messages then. It spares an answer
# the two messages and the checks of every header that uvicorn makes for any application.
RESPOND = "etrt.respond"
# The largest body the fronts' native path (service/front/native_path.py) takes: what arrives in
# one read, and what the v2 binary reader takes as it comes rather than into an arena slot of
# its own (transport.SMALL_BODY).
NATIVE_BODY = 64 * 1024
# The largest v2 binary body the native path takes before it has arrived whole (its tensors then
# go from each chunk into their arena slot); larger ones take the Python path, whose memory grows
# with what arrives (v2_rest/transport.py: read_aligned_body).
STREAMED_BODY = 16 * 1024 * 1024
_CONTENT_LENGTH = b"\r\ncontent-length:"


def body_to_come(data: bytes) -> bool:
    """Whether `data`, a connection's first read of a request that the native path declined, is
    a whole POST head whose body (at most STREAMED_BODY bytes, declared) has not all come: the
    native path is offered it once more with the next read. Clients built on h11 (httpx, so
    KServe's REST client) send a request's head and body in two writes, so the head often
    arrives alone, and the native path takes only a request whose JSON body, or a binary body's
    JSON header, is in the read it is offered. A head asking `Expect: 100-continue` is not held:
    its client waits for uvicorn's interim answer."""
    if not data.startswith(b"POST "):
        return False
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return False
    head = data[:end].lower()
    at = head.find(_CONTENT_LENGTH)
    if at < 0 or b"\r\nexpect:" in head:
        return False
    value_at = at + len(_CONTENT_LENGTH)
    line_end = head.find(b"\r\n", value_at)
    value = head[value_at : line_end if line_end >= 0 else end].strip()
    if not value.isdigit() or len(value) > 9:
        return False
    return len(data) - end - 4 < int(value) <= STREAMED_BODY


class BodySink:
    """`view[:filled]` holds the body so far."""

    __slots__ = ("view", "filled")

    def __init__(self, view, filled: int):
        self.view = view
        self.filled = filled

    def detach(self) -> None:
        """No more bytes go into the view: its memory may be given to another request now."""
        self.view = b""


async def known_model(service, model: str, version: str | None = None) -> None:
    """NotFound for an unknown model or version, before a body is read (or its tensors judged):
    what the process holds answers a served model at once, only any other name costs a call
    (in a front, to the engine)."""
    if not service.serves(model, version):
        await service.model_ready(model, version)


def refuse_when_full(service, model: str, version: str | None, protocol: str) -> None:
    """Busy, before a body is read, for a model whose every method's queue is full now: under
    a flood most requests are such refusals, and reading and decoding their bodies would take
    the cores the admitted requests' executes need (service/dataplane/scheduling/gate.py)."""
    refused = service.refuses(model, version, protocol)
    if refused is not None:
        raise refused.error()


def declared_length(scope: dict) -> int | None:
    """The request's Content-Length, None when absent or not a plain number."""
    for key, value in scope["headers"]:
        if key == b"content-length":
            return int(value) if value.isdigit() else None
    return None


async def chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The body as it arrives."""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnected()
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def read_body(scope: dict, receive: Receive, limit: int, what: str) -> bytes:
    """The whole body; one that arrives in one message is returned as it came (no copy)."""
    declared = declared_length(scope)
    if declared is not None and declared > limit:
        raise too_large(what, limit)
    message = await receive()
    if message["type"] != "http.request":
        raise ClientDisconnected()
    body = message.get("body", b"")
    if len(body) > limit:
        raise too_large(what, limit)
    if not message.get("more_body", False):
        return body
    parts, size = [body], len(body)
    async for chunk in chunks(receive):
        size += len(chunk)
        if size > limit:
            raise too_large(what, limit)
        parts.append(chunk)
    return b"".join(parts)


def answer_headers(content_type: bytes, headers: list, length: int) -> list:
    """A 200's headers after uvicorn's own, in the order every way of writing one keeps (the
    transport's RESPOND, uvicorn's send, the native path), so that a client sees the same bytes
    whichever wrote it: the answer's own headers, its content type, its length."""
    return [*headers, (b"content-type", content_type), (b"content-length", str(length).encode())]


async def respond(scope: dict, send, content_type: bytes, headers: list, body: bytes) -> None:
    """A complete 200 answer, written by the transport itself where it offers to (RESPOND), else
    sent through uvicorn (a pipelined request's, or with the access log on)."""
    direct = scope.get("extensions", {}).get(RESPOND)
    if direct is not None and direct(scope, content_type, headers, body):
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": answer_headers(content_type, headers, len(body)),
        }
    )
    await send({"type": "http.response.body", "body": body})
