"""The fronts' native path for inference requests (runtime_ext/front/, module etrt_front).

A front's Python per request (uvicorn's parser and request cycle, the body codecs, the checks,
the answer's encoding) is what bounds a front's throughput. So the HTTP transport
(http_transport.py) offers each request that arrives on an idle connection to the native path
first: it reads the head and body of `POST /infer` and the v2 infer routes, checks them against
this front's model table as the Python path does, writes the tensors into an arena slot and
returns the engine's lane message (service/shared/lane_frames.py); the engine's answer becomes
the HTTP answer there too. Python's part is sending the message and writing the answer. A v2
binary body (up to STREAMED_BODY) may be taken before it has arrived whole, once its head and
JSON header have: its tensors' bytes then go from each chunk the connection receives straight
into their arena slot (fill()), without uvicorn's parser or the codecs, and the message is sent
when the last byte is in. A v2 request whose tensors name clients' shared memory regions goes as
the lane message with the references the Python path sends (engine_requests._lane_refs), and an
output written into a region is answered with its region's parameters. What the native path
declines (anything it does not read exactly as the Python path would accept: errors, request
parameters, tokens that do not check, non-finite JSON values, a table older than the engine's)
goes to uvicorn's parser as it came, so every error answer is made where it always was. An
error the engine answers for a request taken here is written from the protocol's own error
response. gRPC's ModelInfer comes here from its servicer's binding (infer_grpc): grpcio has
received the message whole, its tensors go into an arena slot in the same way, and the answer
is the response message, made from where the outputs lie; an error is raised for the binding to
word as its status.

A full queue on record (the front's gate, service/dataplane/scheduling/gate.py) is asked about
each request read here before its message is sent, and its refusal answered here too: under a
flood most requests are refusals, and on the Python path each would cost uvicorn's parser, the
request cycle and, for a native JSON body (whose model is inside it), the decoding of its
numbers, on the cores the admitted requests' executes need. A body that would still be arriving
(streamed) is left to the Python path while a queue is full, which refuses before reading it.
"""

from __future__ import annotations

import asyncio
import pickle
import struct
import time
from collections.abc import Callable

import numpy as np

from service.dataplane.scheduling.gate import Refusal
from service.errors import ServiceError
from service.front.engine_requests import deadline_passed
from service.front.protocols.bodies import NATIVE_BODY, STREAMED_BODY
from service.front.protocols.http_errors import internal_error_response
from service.shared import frames, lane_frames

# Protocols as the Python path names them (InferRequest.protocol): a streamed body is a v2
# binary one, and gRPC's servicer names its own.
_STREAMED, GRPC = "v2 binary", "gRPC"
_ROUTE = struct.Struct("<I")  # a lane request's route id, at _ROUTE_AT (lane_frames._REQUEST)
_ROUTE_AT = 4


def _entries(table, routes: dict) -> list:
    """The model table as the native path reads it: the methods the engine's lane serves;
    `routes` gets what each route id names, (model, version, method), for the gate."""
    defaults = {name: entry for name, entry in table.models.items()}
    found = []
    for (model, version), entry in table.versions.items():
        methods = []
        for method, route in entry.routes.items():
            routes[route] = (model, entry.version, method)
            signature = entry.signatures[method]
            methods.append(
                (
                    method,
                    route,
                    [(s.name, s.datatype, list(s.shape), s.dynamic) for s in signature.inputs],
                    [
                        (s.name, s.datatype, list(s.shape), s.dynamic, s.tag == "Tensor")
                        for s in signature.outputs
                    ],
                )
            )
        if methods:
            default = defaults.get(model) is entry
            found.append((model, version, default, entry.max_batch, methods))
    return found


class NativePath:
    """One front's native path over its engine client's current link (a new link, after the
    engine restarted, brings a new arena and a new native path)."""

    def __init__(self, client, settings, infer_token: str | None, renderers: dict[str, Callable]):
        self._client = client
        self._token = infer_token
        self._renderers = renderers  # protocol ("native", "v2") -> its error response
        json_limit = min(settings.max_json_bytes, settings.max_infer_bytes)
        self._limits = (
            min(NATIVE_BODY, json_limit),
            min(NATIVE_BODY, settings.max_infer_bytes),
            json_limit,
            self._token,
            min(STREAMED_BODY, settings.max_infer_bytes),
        )
        self._link = None
        self._native = None
        self._table = None
        self._routes: dict[int, tuple[str, str, str]] = {}  # route id -> (model, version, method)
        self._headers_from = None
        self._headers = b""

    def _current(self):
        """The native path for the link in use now, its table current; None when requests
        must take the Python path."""
        link = self._client.native_path_link()
        if link is None:
            return None
        if link is not self._link:
            import etrt_front

            control = np.frombuffer(link.control, np.uint64).ctypes.data
            self._native = etrt_front.FrontLane(
                link.arena.slots, link.arena.region.address, control, *self._limits
            )
            self._link, self._table = link, None
        table = self._client.table
        if table.generation < 0:  # none yet from this engine
            return None
        if table is not self._table:
            routes = {}
            self._native.publish(table.generation, _entries(table, routes))
            self._table, self._routes = table, routes
        return self._native

    def take(self, data: bytes, answered: Callable) -> tuple[int, object, bool] | None:
        """(bytes of `data` the request took, what answer() needs, whether its message is sent);
        `answered(message)` then runs with the engine's answer. Not sent: its body is still
        arriving, fill() takes the rest. None: declined."""
        native = self._current()
        if native is None:
            return None
        taken = native.take(data)
        if taken is None:
            return None
        request_id, consumed, message = taken
        ticket = (native, request_id, self._link)
        if message is None:
            if self._client.gate.any_closed:  # the Python path refuses before reading it
                native.release(request_id)
                return None
            return consumed, ticket, False
        self._send(ticket, message, answered, data)
        return consumed, ticket, True

    def fill(self, ticket, data: bytes, answered: Callable) -> tuple[int, bool]:
        """More of a taken request's body: (bytes of `data` that were its, whether it is whole
        and its message sent)."""
        native, request_id, _ = ticket
        consumed, message = native.fill(request_id, data)
        if message is None:
            return consumed, False
        self._send(ticket, message, answered, _STREAMED)
        return consumed, True

    def _send(self, ticket, message: bytes, answered: Callable, protocol: str | bytes) -> None:
        """Sends the request's lane message, unless the engine went away or the gate refuses
        it: then `answered` gets None or the Refusal, after the caller has the ticket.
        `protocol`: as the gate shares a full queue's places out (InferRequest.protocol), or the
        bytes the request began with, read for it only when a queue is full (reading them cost
        0.6 us of the 15 us a tiny request costs a front on 2 cores)."""
        _, request_id, link = ticket
        if not link.alive:  # the engine went away while the body arrived: its 503, once
            asyncio.get_running_loop().call_soon(answered, None)  # the caller holds the ticket
            return
        refusal = self._gate(message, protocol)
        if refusal is not None:
            asyncio.get_running_loop().call_soon(answered, refusal)
            return
        link.relays[request_id] = answered
        link.protocol.send_payload(message)
        self._client.native_requests += 1

    def _gate(self, message: bytes, protocol: str | bytes) -> Refusal | None:
        """The gate's refusal of the request `message` stands for, if its queue is full."""
        client = self._client
        if not client.gate.any_closed:  # no queue is full: nothing of the request to read
            return None
        model, version, method = self._routes[_ROUTE.unpack_from(message, _ROUTE_AT)[0]]
        if client.gate.open_for(model, version, method):
            return None
        if isinstance(protocol, bytes):
            protocol = _protocol(protocol)
        return client.admits(model, version, method, protocol)

    def drop(self, ticket) -> None:
        """A request whose body was arriving, abandoned (its client went away): no message was
        sent, only its slot to free."""
        native, request_id, _ = ticket
        native.release(request_id)

    def cancel(self, ticket, deadline: bool = False) -> None:
        """The client went away (or stopped waiting at the request's `deadline`): the engine
        need not answer (it frees the slot when it does)."""
        _, request_id, link = ticket
        if link.alive:
            link.protocol.send_payload(lane_frames.cancel(request_id, deadline))

    def answer(self, ticket, message, default_headers: list, fd: int = -1) -> tuple[bytes, bool]:
        """(the HTTP answer to write, whether the connection stays open) for the engine's
        `message` (messages.Done or messages.LaneDone; None: the engine went away; a Refusal:
        the gate refused it). `fd`: the connection's socket when nothing waits to be written
        before this answer (-1: none); a 200 goes to it from where its outputs lie
        (runtime_ext/front/answer_send.h) and only what it did not take is returned."""
        native, request_id, _ = ticket
        headers = self._header_bytes(default_headers)
        kind = getattr(message, "kind", None)  # None: the engine went away, or the gate refused
        if kind == frames.LANE_DONE:
            written = native.answer_lane(request_id, bytes(message.payload), headers, fd)
            if written is not None:
                return written
        elif kind == frames.DONE and message.ok:  # run by the engine's Python: outputs placed
            placed = self._placed(ticket, message)
            if placed is not None:
                written = native.answer(request_id, message.payload[0], placed, headers, fd)
                if written is not None:
                    return written
        released = native.release(request_id)
        protocol, keep_alive = released if released is not None else ("v2", False)
        response = self._error_response(message, protocol)
        return _response_bytes(response, headers, keep_alive), keep_alive

    @staticmethod
    def _placed(ticket, message) -> list | None:
        """The outputs of an answer the engine's Python placed, as answer() takes them; None
        when one is not the request's."""
        native, request_id, link = ticket
        _, outputs = message.payload
        region = link.arena.region
        placed = []
        for name, _, shape, offset, inline in outputs:
            index = native.output_index(request_id, name)
            if index < 0:
                return None
            if offset == -1:  # written into the client's shared memory region
                placed.append((index, list(shape), None))
            else:
                placed.append((index, list(shape), inline or region.address + offset))
        return placed

    def forget(self, ticket, message) -> None:
        """The engine's answer to a request whose client went away: only the slot to free."""
        native, request_id, _ = ticket
        native.release(request_id)

    def _error_response(self, message, protocol: str):
        """The protocol's answer to the engine's refusal, the gate's, or the engine's going
        away."""
        error = self._error(message)
        if isinstance(error, ServiceError):
            return self._renderers[protocol](error)
        return internal_error_response(str(error))

    def _error(self, message) -> Exception:
        """What went wrong, for an answer that is not the request's outputs: the engine's
        refusal, the gate's, or the engine's going away (ServiceErrors, which each protocol
        words as its own), or a failure inside the server."""
        if message is None:
            return self._client.down()
        if isinstance(message, Refusal):
            return message.error()
        if message.kind == frames.DONE and not message.ok:
            error = self._client.engines_error(pickle.loads(message.payload))
            if isinstance(error, ServiceError):
                return error
            return RuntimeError(f"inference failed in the engine: {error}")
        # An answer the native path could not write (none should be).
        return RuntimeError(
            f"the native path could not write the answer to request {message.request_id!r}"
        )

    async def infer_grpc(self, wire: bytes, timeout_s: float | None = None) -> bytes | None:
        """A gRPC ModelInfer request message, taken here from its bytes to its answer's
        (runtime_ext/front/grpc_infer.h), or None: declined (the servicer's to parse). Errors
        raise: ServiceErrors for the binding to word as statuses.

        `timeout_s`: the time the call has left before its deadline (None: no deadline). grpcio
        cancels the call at its deadline; the cancel then says so, and the engine drops the
        request if it still waits for an instance, counted as a deadline passed, as the
        servicer's path counts one."""
        begun = time.perf_counter()
        native = self._current()
        if native is None:
            return None
        taken = native.take_grpc(wire)
        if taken is None:
            return None
        request_id, message = taken
        ticket = (native, request_id, self._link)
        answer = asyncio.get_running_loop().create_future()

        def answered(message) -> None:
            if answer.done():  # its caller went away: only the slot to free
                self.forget(ticket, message)
            else:
                answer.set_result(message)

        self._send(ticket, message, answered, GRPC)
        try:
            message = await answer
        except asyncio.CancelledError:  # the call was cancelled, or its client went away
            if answer.cancelled():  # the engine need not answer; answered() frees the slot
                self.cancel(ticket, deadline_passed(timeout_s, time.perf_counter() - begun))
            else:  # answered already, but this call will not write it: only the slot to free
                self.forget(ticket, answer.result())
            raise
        return self._grpc_answer(ticket, message)

    def _grpc_answer(self, ticket, message) -> bytes:
        native, request_id, _ = ticket
        kind = getattr(message, "kind", None)
        written = None
        if kind == frames.LANE_DONE:
            written = native.answer_lane_grpc(request_id, bytes(message.payload))
        elif kind == frames.DONE and message.ok:
            placed = self._placed(ticket, message)
            if placed is not None:
                written = native.answer_grpc(request_id, message.payload[0], placed)
        if written is not None:
            return written
        native.release(request_id)
        raise self._error(message)

    def _header_bytes(self, default_headers: list) -> bytes:
        # uvicorn replaces its list (date, server) once a second: joined once per list.
        if default_headers is not self._headers_from:
            self._headers = b"".join(n + b": " + v + b"\r\n" for n, v in default_headers)
            self._headers_from = default_headers
        return self._headers


def _protocol(head: bytes) -> str:
    """The request's protocol as the gate shares a full queue's places out (as the Python path
    names it: InferRequest.protocol), from the bytes it began with."""
    if head.startswith(b"POST /infer "):
        return "native"
    end = head.find(b"\r\n\r\n")
    return "v2 binary" if b"inference-header-content-length:" in head[:end].lower() else "v2 JSON"


def _response_bytes(response, default_headers: bytes, keep_alive: bool) -> bytes:
    """A Starlette response (an error's) as the bytes uvicorn would write for it."""
    from uvicorn.protocols.http.httptools_impl import STATUS_LINE

    parts = [STATUS_LINE[response.status_code], default_headers]
    for name, value in response.raw_headers:
        parts += (name, b": ", value, b"\r\n")
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    parts += (b"\r\n", response.body)
    return b"".join(parts)
