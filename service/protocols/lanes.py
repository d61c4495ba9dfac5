"""Small inference requests answered from the HTTP connection's own callbacks, without a task.

Measured on a front (tiny program, 64 connections), a request's way through uvicorn's request
cycle (a task, the app's layers of coroutines, the body as a message, the engine's answer
awaited back up through them) cost as much as all that the protocol and the engine link do for
it. So a fast route may have a lane (FastRoute.lane): once a small request's whole body is in,
the connection calls the lane, which decodes and checks it, sends it to the engine
(EngineClient.submit) and answers from the engine's answer callback.

A lane takes only what it can finish that way. Anything else goes the ASGI way untouched, the
body as it came: a body that is large or still streaming, a model table out of date, a token
that does not check, a full gate, and any problem in the request (the ASGI way finds it again and
answers it, so every error body is made in one place). A lane that took a request answers it once
through its Reply: written at once, or through an ASGI app run on the request's cycle (an error
from the engine, an answer too large to write inline), as any request is answered. A client that
goes away meanwhile cancels the engine request, which the scheduler drops if it has not run.
"""

from __future__ import annotations

from collections.abc import Callable

from service import auth
from service.errors import ServiceError, clip
from service.protocols.bodies import respond
from service.protocols.http_errors import internal_error_response

# The largest body a lane takes: what arrives in one read, and what the v2 binary reader takes
# as it comes rather than into an arena slot of its own (transport.SMALL_BODY).
LANE_BODY = 64 * 1024

# lane(scope, body, reply): what cancels the request it took, or None (not taken).
Lane = Callable[[dict, bytes, "Reply"], Callable[[], None] | None]


def may_take(scope: dict, policy: auth.Policy) -> bool:
    """Whether the request may try a lane: a declared body of at most LANE_BODY bytes, and the
    inference token, when there is one, presented (a denial is the ASGI way's to answer)."""
    length = authorization = None
    for key, value in scope["headers"]:
        if key == b"content-length":
            length = value
        elif key == b"authorization":
            authorization = value
        elif key == b"transfer-encoding":
            return False
    if length is None or not length.isdigit() or int(length) > LANE_BODY:
        return False
    if policy.infer_token is None:
        return True
    presented = None if authorization is None else authorization.decode("latin-1")
    return policy.check(auth.INFER, presented) is None


class Reply:
    """How a lane answers the request it took (service/protocols/http_transport.py)."""

    __slots__ = ("_protocol", "_cycle")

    def __init__(self, protocol, cycle):
        self._protocol = protocol
        self._cycle = cycle

    def ok(self, content_type: bytes, headers: list, body: bytes) -> None:
        """A 200 with `body`, written at once where the connection can take it now."""
        protocol = self._protocol
        if not protocol.answered(self._cycle, content_type, headers, body):
            self.asgi(_complete(content_type, headers, body))

    def fail(self, error: BaseException, render: Callable) -> None:
        """The answer to `error`: `render(error)` (the protocol's error response) for a
        ServiceError, else the 500 of a fault of the server's own, logged."""
        if isinstance(error, ServiceError):
            self.asgi(render(error))
            return
        scope = self._cycle.scope
        what = f"unexpected error serving {scope['method']} {clip(scope['path'])}"
        self.asgi(internal_error_response(what, (type(error), error, error.__traceback__)))

    def asgi(self, app) -> None:
        """The answer `app` gives, sent through the request's cycle as an ASGI app's is."""
        self._protocol.answer_with(self._cycle, app)


def _complete(content_type: bytes, headers: list, body: bytes):
    async def app(scope, receive, send) -> None:
        await respond(scope, send, content_type, headers, body)

    return app
