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

Before any of that, a request that arrives on an idle connection is offered to the fronts'
native path (service/front/native_path.py), which may take it from its bytes to its answer's
bytes without uvicorn's parser, the request cycle or the codecs (a v2 binary body whose head
and JSON header are here may still be arriving: its next chunks go to the native path, into the
request's arena slot); what arrives meanwhile waits for that answer, so the connection's answers
keep its requests' order. Everything it declines is
uvicorn's, as it came: the ASGI route is the one other path.

A reader that has its body's final place (a v2 binary body's arena slot) hands it over through
the scope extension bodies.BODY_INTO, and the chunks that arrive after are copied there as they
come: uvicorn would otherwise gather them in a buffer, copy that into a message per wakeup, and
the reader would copy each message again. A chunk that does not fit goes the usual way, so the
reader sees a body longer than its room and refuses it.

With --one-port, a new connection's first bytes are looked at before any of that: one that opens
with HTTP/2's preface is gRPC's (h2_relay.py), and is relayed, unread, from then on.
"""

from __future__ import annotations

import asyncio
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.front.protocols import h2_relay
from service.front.protocols.bodies import (
    BODY_INTO,
    NATIVE_BODY,
    RESPOND,
    BodySink,
    answer_headers,
    body_to_come,
)
from service.front.protocols.half_close import PeerWatch
from service.front.protocols.read_timeouts import (
    BODY_TIMEOUT_S,
    HEADER_TIMEOUT_S,
    IDLE,
    ReadClock,
    ReadTimeouts,
    timeout_answer,
)

# Above this, the parts are handed to the transport as they are rather than joined into one
# buffer (a copy that would cost more than the calls it saves).
_JOIN_BELOW = 256 * 1024
# Bytes a connection may send while the native path answers it, before reading pauses.
_HELD_AT_MOST = 4 * NATIVE_BODY
_OK = b"HTTP/1.1 200 OK\r\n"
log = logging.getLogger(__name__)


class _GatheringTransport:
    """Stands in for the connection's transport: writes wait for the end of the loop turn;
    everything else goes to the real transport."""

    __slots__ = ("_transport", "_loop", "_pending", "_size", "_fd")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._size = 0
        sock = transport.get_extra_info("socket")
        plain = sock is not None and transport.get_extra_info("sslcontext") is None
        self._fd = sock.fileno() if plain else -1

    def free_fd(self) -> int:
        """The socket, for an answer written to it directly (the native path's, from its arena
        slot: no copy through Python bytes), when nothing of this connection waits to be
        written before it, here or in the transport, and the connection is open; else -1."""
        if self._pending or self._fd < 0 or self._transport.is_closing():
            return -1
        return -1 if self._transport.get_write_buffer_size() else self._fd

    def write(self, data) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)
        self._size += len(data)

    def write_now(self, data) -> None:
        """A whole answer: written at once, after whatever waits (no end-of-turn call for it)."""
        if not data:
            return
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

    @property
    def raw(self) -> asyncio.Transport:
        return self._transport

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
    # Read timeouts (service/front/protocols/read_timeouts.py); set by the app's settings.
    timeouts = ReadTimeouts(HEADER_TIMEOUT_S, BODY_TIMEOUT_S)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_GatheringTransport(transport, self.loop))
        self._reading = ReadClock(self)
        self._reading.head_begins()
        self._sink: BodySink | None = None  # the body arriving now goes here
        self._extensions = {BODY_INTO: self._body_into, RESPOND: self._respond}
        front_lane = getattr(self.app, "native_path", None)
        self._front_lane = None if self.access_log else front_lane  # access lines: uvicorn's
        probes = getattr(self.app, "inline_probes", None)
        self._probes = None if self.access_log else probes
        self._drain = getattr(self.app, "drain", None)  # draining: the Python path answers 503
        self._h2 = getattr(self.app, "h2_target", None)  # --one-port: gRPC's private socket
        self._first = b""  # the bytes seen while they may still be HTTP/2's preface
        self._relay: h2_relay.Relay | None = None
        self._native = None  # what the native path needs to answer the request it took
        self._arriving = None  # the same, for a request it took whose body is still arriving
        self._held = b""  # what the client sent meanwhile
        self._head = b""  # a request read in part, held for more of it (bodies.body_to_come)
        self._parsing = False  # uvicorn's parser is inside a request
        self._gone = False
        self._close_after = False
        self._bad_request = None  # uvicorn's 400 for bytes after a whole request, held back
        self._peer: PeerWatch | None = None  # the client sent a FIN with an answer pending

    def data_received(self, data: bytes) -> None:
        if self._reading.in_body:
            self._reading.progressed()
        if self._relay is not None:
            self._relay.to_server(data)
            return
        if self._h2 is not None:  # the connection's first bytes: HTTP/2 or not
            data = self._first + data
            found = h2_relay.sniff(data)
            if found is None:
                self._first = data
                return
            if found:
                self._relay_to_grpc(data)
                return
            self._h2, self._first = None, b""
        if self._bad_request is not None:  # the parser has failed: nothing more is read
            return
        if self._arriving is not None:  # the taken request's body, into its slot
            self._fill(data)
            return
        if self._native is not None:  # answered first: the connection's order
            self._held += data
            if len(self._held) > _HELD_AT_MOST:
                self.flow.pause_reading()
            return
        retried = bool(self._head)
        if retried:  # the head came alone: with the body's first bytes, offered once more
            data, self._head = self._head + data, b""
        idle = (
            not self._parsing
            and (self.cycle is None or self.cycle.response_complete)
            and not self.pipeline
            and not self.flow.write_paused
            and not (self._drain is not None and self._drain.active)
        )
        if idle and self._probes is not None:  # a health probe: answered in this callback
            answer = self._probes.respond(data, self.server_state.default_headers)
            if answer is not None:
                self._unset_keepalive_if_required()
                self.transport.write_now(answer)
                self.server_state.total_requests += 1
                self.timeout_keep_alive_task = self.loop.call_later(
                    self.timeout_keep_alive, self.timeout_keep_alive_handler
                )
                return
        if idle and self._front_lane is not None:
            try:
                taken = self._front_lane.take(data, self._native_answered)
            except Exception:  # a fault of the native path's own: the Python path serves it
                log.exception("the native path failed on a request; the Python path takes it")
                taken = None
            if taken is not None:
                consumed, ticket, sent = taken
                if self.timeout_keep_alive_task is not None:  # armed after a Python path answer
                    self._unset_keepalive_if_required()
                if sent:
                    self._reading.stop()  # the idle (keep-alive) phase after a native answer too
                    self._native = ticket
                    self._held = data[consumed:]
                else:  # all of `data` was its: the rest of its body comes next
                    self._reading.body_begins()
                    self._arriving = ticket
                return
            if not retried and body_to_come(data):  # offered again with what comes next
                self._head = data
                self._reading.body_begins()  # its body must come, as any body must
                return
        HttpToolsProtocol.data_received(self, data)

    def _release_head(self) -> None:
        """A head held for its body goes to uvicorn's parser after all (the connection is ending
        or the server stopping): the request is uvicorn's to finish, or to log as aborted."""
        if self._head:
            head, self._head = self._head, b""
            HttpToolsProtocol.data_received(self, head)

    def _fill(self, data: bytes) -> None:
        consumed, sent = self._front_lane.fill(self._arriving, data, self._native_answered)
        if sent:
            self._reading.stop()
            self._native, self._arriving = self._arriving, None
            if consumed < len(data):
                self._held = data[consumed:]

    @property
    def answering_natively(self) -> bool:
        """A request the native path took is in flight, or its body arriving (uvicorn counts no
        task for it)."""
        return self._native is not None or self._arriving is not None

    def _relay_to_grpc(self, data: bytes) -> None:
        """From now on the connection is the gRPC server's: out of uvicorn's connections (its
        shutdown does not wait for it: the gRPC server's stop ends it) and of the read clocks
        (HTTP/2 has its own keep-alive)."""
        self._reading.stop()
        self.connections.discard(self)
        self._relay = h2_relay.Relay(self.transport.raw, data, self._h2)

    def pause_writing(self) -> None:
        if self._relay is not None:
            self._relay.client_paused_writing()
        else:
            HttpToolsProtocol.pause_writing(self)

    def resume_writing(self) -> None:
        if self._relay is not None:
            self._relay.client_resumed_writing()
        else:
            HttpToolsProtocol.resume_writing(self)

    def _native_answered(self, message) -> None:
        ticket, self._native = self._native, None
        if self._gone:
            self._front_lane.forget(ticket, message)
            return
        answer, keep_alive = self._front_lane.answer(
            ticket, message, self.server_state.default_headers, self.transport.free_fd()
        )
        self.transport.write_now(answer)  # what the socket did not take (or all of it)
        self.server_state.total_requests += 1
        if not keep_alive or self._close_after:
            self.transport.close()
            return
        self._reading.idle_begins()  # uvicorn's keep-alive timeout, without a timer per request
        held, self._held = self._held, b""
        if self.flow.read_paused:
            self.flow.resume_reading()
        if held:
            self.data_received(held)

    def shutdown(self) -> None:
        if self._native is not None or self._arriving is not None:  # closed once answered
            self._close_after = True
            return
        self._release_head()  # uvicorn serves that request to its end before it closes
        HttpToolsProtocol.shutdown(self)

    def on_message_begin(self) -> None:
        self._parsing = True
        self._reading.head_begins()
        HttpToolsProtocol.on_message_begin(self)

    def on_message_complete(self) -> None:
        self._parsing = False
        self._reading.stop()
        HttpToolsProtocol.on_message_complete(self)

    def connection_lost(self, exc) -> None:
        self._release_head()
        if self._relay is not None:
            self._relay.client_lost()
        HttpToolsProtocol.connection_lost(self, exc)
        self._reading.stop()
        if self._peer is not None:
            self._peer.stop()
        self._gone = True
        if self._native is not None:  # nobody reads its answer: the engine need not make it
            self._front_lane.cancel(self._native)
        if self._arriving is not None:  # never sent: only its slot to free
            ticket, self._arriving = self._arriving, None
            self._front_lane.drop(ticket)

    def on_headers_complete(self) -> None:
        HttpToolsProtocol.on_headers_complete(self)
        self.scope["extensions"] = self._extensions
        self._sink = None
        self._reading.body_begins()

    def eof_received(self) -> bool:
        """The client's FIN. With no whole request awaiting its answer, the client is taken
        as leaving (the connection closes, as uvicorn does). With one, it may be a half-close
        or a close: half_close.PeerWatch tells them apart (a probe the peer resets if it left);
        a half-closed client gets its answer, then the connection closes."""
        self._release_head()
        self._reading.stop()
        native = self._native is not None
        cycle = self.cycle
        asgi = (
            not native
            and cycle is not None
            and not cycle.response_complete
            and not self._parsing
            and cycle.scope.get("http_version") == "1.1"
        )
        if not (native or asgi):
            return False
        probe = native or not cycle.response_started
        self._peer = PeerWatch.start(self.loop, self.transport, probe, self.transport.close)
        if self._peer is None:
            return False
        if native:
            self._close_after = True
        else:
            cycle.keep_alive = False  # uvicorn closes once the answer is written
        return True

    def timed_out(self, what: str) -> None:
        """The head or body stopped arriving (ReadClock): 408 if no answer has begun, then the
        connection closes; the request's reader sees a disconnect and frees what it holds.
        An idle keep-alive connection closes without a word, as uvicorn closes it."""
        if what == IDLE:
            self.timeout_keep_alive_handler()
            return
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not cycle.response_started:
            self.transport.write_now(timeout_answer(what, self.timeouts))
        self.transport.close()

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
        own = answer_headers(content_type, headers, len(body))
        for name, value in (*self.server_state.default_headers, *own):
            parts += (name, b": ", value, b"\r\n")
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

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to bytes its parser refuses. Bytes that follow a whole request
        (received, maybe running already) are answered after that request's answer, as the
        native path answers them (RFC 9112: answers in the order of the requests; bytes that
        are no request get a 400 and the connection closes); uvicorn would write the 400 at once
        and close, and the client would never get the answer of a request that ran."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and not cycle.more_body:
            self._bad_request = msg
            self.flow.pause_reading()
            return
        HttpToolsProtocol.send_400_response(self, msg)

    def on_response_complete(self) -> None:
        # Before a pipelined next request starts: its answer must not overtake this one.
        self.transport.flush()
        super().on_response_complete()
        if self._bad_request is not None and self.cycle.response_complete:  # the last one
            if not self.transport.is_closing():  # else closed after the answer, as it asked
                HttpToolsProtocol.send_400_response(self, self._bad_request)
