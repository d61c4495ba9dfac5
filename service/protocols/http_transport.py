"""uvicorn's httptools protocol, with each answer written to its connection in one write and
large bodies received straight into the memory their reader gives.

uvicorn writes a response's head and its body (and each part of a multipart body) as separate
`transport.write`s, and uvloop makes a system call for each at once, holding the GIL: measured on
small v2 answers, a third of a front's time went to those calls. Here writes are gathered and go
out together once the response is complete (uvicorn's on_response_complete), so an answer is one
system call and waits for nothing else; whatever is written outside a response (a 100 Continue,
uvicorn's own 400s) goes out at the end of the loop turn. Bytes and order are unchanged, and data
written just before a close goes out before the close.

A complete small answer may skip uvicorn's response messages altogether (bodies.RESPOND): the
protocol writes its status line, uvicorn's default headers (date, server), the answer's own
and its body as one buffer, and marks uvicorn's request cycle done as uvicorn's send would.

A small inference request may be answered without a task at all: once its body is in, the
connection hands it to its route's lane (service/protocols/lanes.py), and a request the lane does
not take starts its ASGI task then, its body waiting in the cycle as uvicorn leaves it.

Before any of that, a request that arrives whole on an idle connection is offered to the fronts'
native path (front_lane.py), which may take it from its bytes to its answer's bytes without
uvicorn's parser, the request cycle or the codecs; what arrives meanwhile waits for that answer,
so the connection's answers keep its requests' order.

A reader that has its body's final place (a v2 binary body's arena slot) hands it over through
the scope extension bodies.BODY_INTO, and the chunks that arrive after are copied there as they
come: uvicorn would otherwise gather them in a buffer, copy that into a message per wakeup, and
the reader would copy each message again. A chunk that does not fit goes the usual way, so the
reader sees a body longer than its room and refuses it.
"""

from __future__ import annotations

import asyncio
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.errors import clip
from service.protocols.bodies import BODY_INTO, RESPOND, BodySink
from service.protocols.disconnect import log_aborted
from service.protocols.http_errors import internal_error_response
from service.protocols.lanes import LANE_BODY, Reply

# Above this, the parts are handed to the transport as they are rather than joined into one
# buffer (a copy that would cost more than the calls it saves).
_JOIN_BELOW = 256 * 1024
# Bytes a connection may send while the native path answers it, before reading pauses.
_HELD_AT_MOST = 4 * LANE_BODY
_OK = b"HTTP/1.1 200 OK\r\n"
log = logging.getLogger(__name__)


class _GatheringTransport:
    """Stands in for the connection's transport: writes wait for the end of the loop turn;
    everything else goes to the real transport."""

    __slots__ = ("_transport", "_loop", "_pending", "_size")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._size = 0

    def write(self, data) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)
        self._size += len(data)

    def write_now(self, data) -> None:
        """A whole answer: written at once, after whatever waits (no end-of-turn call for it)."""
        if self._pending:
            self.write(data)
            self.flush()
        elif not self._transport.is_closing():
            self._transport.write(data)

    def writelines(self, items) -> None:
        for data in items:
            self.write(data)

    def flush(self) -> None:
        pending, size = self._pending, self._size
        if not pending:
            return
        self._pending, self._size = [], 0
        if self._transport.is_closing():
            return
        if len(pending) == 1:
            self._transport.write(pending[0])
        elif size < _JOIN_BELOW:
            self._transport.write(b"".join(pending))
        else:
            self._transport.writelines(pending)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._size

    def __getattr__(self, name):
        return getattr(self._transport, name)


class GatheringHttpToolsProtocol(HttpToolsProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_GatheringTransport(transport, self.loop))
        self._sink: BodySink | None = None  # the body arriving now goes here
        self._extensions = {BODY_INTO: self._body_into, RESPOND: self._respond}
        self._lane_for = getattr(self.app, "lane_for", None)  # the app's lanes, if it has any
        self._waiting = None  # (cycle, app, lane): a request for a lane whose body is arriving
        self._in_flight = None  # (cycle, cancel): a request a lane took, not answered yet
        front_lane = getattr(self.app, "native_path", None)
        self._front_lane = None if self.access_log else front_lane  # access lines: uvicorn's
        self._native = None  # what the native path needs to answer the request it took
        self._held = b""  # what the client sent meanwhile
        self._parsing = False  # uvicorn's parser is inside a request
        self._gone = False
        self._close_after = False

    def data_received(self, data: bytes) -> None:
        if self._native is not None:  # answered first: the connection's order
            self._held += data
            if len(self._held) > _HELD_AT_MOST:
                self.flow.pause_reading()
            return
        if (
            self._front_lane is not None
            and not self._parsing
            and (self.cycle is None or self.cycle.response_complete)
            and not self.pipeline
            and self._waiting is None
            and self._in_flight is None
            and not self.flow.write_paused
        ):
            try:
                taken = self._front_lane.take(data, self._native_answered)
            except Exception:  # a fault of the native path's own: the Python path serves it
                log.exception("the native path failed on a request; the Python path takes it")
                taken = None
            if taken is not None:
                consumed, self._native = taken
                self._unset_keepalive_if_required()
                self._held = data[consumed:]
                return
        HttpToolsProtocol.data_received(self, data)

    def _native_answered(self, message) -> None:
        ticket, self._native = self._native, None
        if self._gone:
            self._front_lane.forget(ticket, message)
            return
        answer, keep_alive = self._front_lane.answer(
            ticket, message, self.server_state.default_headers
        )
        self.transport.write_now(answer)
        self.server_state.total_requests += 1
        if not keep_alive or self._close_after:
            self.transport.close()
            return
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )
        held, self._held = self._held, b""
        self.flow.resume_reading()
        if held:
            self.data_received(held)

    def shutdown(self) -> None:
        if self._native is not None:  # closed once its answer is written
            self._close_after = True
            return
        HttpToolsProtocol.shutdown(self)

    def on_message_begin(self) -> None:
        self._parsing = True
        HttpToolsProtocol.on_message_begin(self)

    def _start_asgi_task(self, cycle, app) -> None:
        """Where uvicorn starts a request's task, once its head is in: a request that a lane may
        take waits for its body instead."""
        lane = None
        if self._lane_for is not None and app is self.app and not cycle.waiting_for_100_continue:
            lane = self._lane_for(cycle.scope)
        if lane is None:
            HttpToolsProtocol._start_asgi_task(self, cycle, app)
            return
        self._waiting = (cycle, app, lane)
        if not cycle.more_body:  # a pipelined request, whose body came before its turn
            self._run_lane()

    def on_message_complete(self) -> None:
        self._parsing = False
        HttpToolsProtocol.on_message_complete(self)
        waiting = self._waiting
        if waiting is not None and waiting[0] is self.cycle:
            self._run_lane()

    def _run_lane(self) -> None:
        cycle, app, lane = self._waiting
        self._waiting = None
        if cycle.disconnected:
            return
        body = bytes(cycle.body)
        try:
            cancel = lane(cycle.scope, body, Reply(self, cycle))
        except Exception:  # a fault of the server's own, answered as the ASGI way's 500 guard does
            scope = cycle.scope
            log.exception("unexpected error serving %s %s", scope["method"], clip(scope["path"]))
            HttpToolsProtocol._start_asgi_task(self, cycle, internal_error_response())
            return
        if cancel is None:  # not taken: the ASGI way, with the body where uvicorn keeps it
            HttpToolsProtocol._start_asgi_task(self, cycle, app)
        else:
            cycle.body = bytearray()
            self._in_flight = (cycle, cancel)

    def answered(self, cycle, content_type: bytes, headers: list, body: bytes) -> bool:
        """A lane's 200 for `cycle`, written at once; False when it must go as ASGI messages."""
        self._settled(cycle)
        return self._respond(cycle.scope, content_type, headers, body)

    def answer_with(self, cycle, app) -> None:
        """A lane's answer for `cycle` from an ASGI app, run as uvicorn runs a request's."""
        self._settled(cycle)
        HttpToolsProtocol._start_asgi_task(self, cycle, app)

    def _settled(self, cycle) -> None:
        if self._in_flight is not None and self._in_flight[0] is cycle:
            self._in_flight = None

    def connection_lost(self, exc) -> None:
        HttpToolsProtocol.connection_lost(self, exc)
        self._gone = True
        if self._native is not None:  # nobody reads its answer: the engine need not make it
            self._front_lane.cancel(self._native)
        self._waiting = None
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:  # nobody reads its answer: the engine need not make it
            in_flight[1]()
            log_aborted(in_flight[0].scope)

    def on_headers_complete(self) -> None:
        HttpToolsProtocol.on_headers_complete(self)
        self.scope["extensions"] = self._extensions
        self._sink = None

    def _body_into(self, scope: dict, view, filled: int) -> BodySink | None:
        """None when the body arriving now is not that request's: a pipelined request's came
        after it (that request's own body has arrived whole by then)."""
        cycle = self.cycle
        if cycle is None or cycle.scope is not scope or cycle.response_complete:
            return None
        self._sink = BodySink(view, filled)
        return self._sink

    def _respond(self, scope: dict, content_type: bytes, headers: list, body: bytes) -> bool:
        cycle = self.cycle
        if (
            cycle is None
            or cycle.scope is not scope
            or cycle.response_started
            or cycle.disconnected
            or cycle.flow.write_paused
            or cycle.access_log
        ):
            return False
        cycle.response_started = True
        cycle.waiting_for_100_continue = False
        parts = [_OK]
        for name, value in (*self.server_state.default_headers, *headers):
            parts += (name, b": ", value, b"\r\n")
        parts += (b"content-type: ", content_type, b"\r\ncontent-length: ")
        parts += (str(len(body)).encode(), b"\r\n")
        if not cycle.keep_alive:
            parts.append(b"connection: close\r\n")
        parts += (b"\r\n", body)
        self.transport.write_now(b"".join(parts))
        cycle.response_complete = True
        cycle.message_event.set()
        if not cycle.keep_alive:
            self.transport.close()
        cycle.on_response()
        return True

    def on_body(self, body: bytes) -> None:
        sink = self._sink
        if sink is not None:
            end = sink.filled + len(body)
            if end <= len(sink.view):
                sink.view[sink.filled : end] = body
                sink.filled = end
                return
            self._sink = None  # longer than its room: the reader is told the usual way
        HttpToolsProtocol.on_body(self, body)

    def on_response_complete(self) -> None:
        # Before a pipelined next request starts: its answer must not overtake this one.
        self.transport.flush()
        super().on_response_complete()
