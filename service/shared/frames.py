"""Small control messages between the fronts and the engine, over a Unix socket.

Messages are the records of messages.py, sent as tuples of plain values encoded with `marshal`
(both ends run the same interpreter, and it is several times faster than pickle for tuples of
numbers and strings), each framed by its length. Under load many requests are in flight at
once, so writes are gathered and sent once per turn of the event loop: one system call carries
dozens of descriptors instead of one each.
Anything else (errors, model descriptions) travels as a pickle inside a message.

Tensor bytes never travel here; messages only say where in the front's arena they are. The
engine's native lane speaks two struct-packed messages besides (lane_frames.py): a front sends
its requests that way when it can, and receives the lane's answers, handed over as their request
id and bytes (the one message a front gets per small request: no tuple is made for it).
"""

from __future__ import annotations

import asyncio
import marshal
import struct
from collections.abc import Callable

from service.shared import lane_frames

_LENGTH = struct.Struct("<I")
_DONE_TAG = bytes([lane_frames.DONE_TAG])
_ANSWER_ID, _ANSWER_ID_AT = lane_frames.ANSWER_ID, lane_frames.ANSWER_ID_AT

# Front -> engine
INFER, CANCEL, CALL, NOTE = 1, 2, 3, 4
# Engine -> front
DONE, RESULT = 11, 12
LANE_DONE = 14  # the lane's answer, as the front reads it (messages.LaneDone)


class FrameProtocol(asyncio.Protocol):
    """Calls `on_message(message)` for each marshalled message received and
    `on_lane_answer(request_id, payload)` for each lane answer; `send` queues one to go out at the
    end of this loop turn. `on_lost(exc)` runs once when the connection ends."""

    def __init__(self, on_message: Callable, on_lane_answer: Callable, on_lost: Callable):
        self._on_message = on_message
        self._on_lane_answer = on_lane_answer
        self._on_lost = on_lost
        self._buffer = bytearray()  # the start of a message not received whole yet
        self._outgoing: list[bytes] = []
        self.transport: asyncio.Transport | None = None
        self._loop = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self._loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        if buffer:  # read from bytes once its first message is whole (payloads are bytes)
            buffer += data
            if len(buffer) < 4 or len(buffer) - 4 < _LENGTH.unpack_from(buffer, 0)[0]:
                return
            data = bytes(buffer)
            buffer.clear()
        start, end = 0, len(data)
        payloads = []
        while end - start >= 4:
            (length,) = _LENGTH.unpack_from(data, start)
            if end - start - 4 < length:
                break
            payloads.append(data[start + 4 : start + 4 + length])
            start += 4 + length
        if start < end:
            buffer += data[start:]
        # Handed over once the buffer is in order: a handler that fails loses no later bytes.
        for payload in payloads:
            if payload[:1] == _DONE_TAG:
                self._on_lane_answer(_ANSWER_ID.unpack_from(payload, _ANSWER_ID_AT)[0], payload)
            else:
                self._on_message(marshal.loads(payload))

    def send(self, message: tuple) -> None:
        """`message`: a record of messages.py, sent as its plain tuple."""
        self.send_payload(marshal.dumps(tuple(message)))

    def send_payload(self, payload: bytes) -> None:
        """A message already encoded (a lane request, lane_frames.request)."""
        if self.transport is None or self.transport.is_closing():
            return
        if not self._outgoing:
            self._loop.call_soon(self._flush)
        self._outgoing.append(_LENGTH.pack(len(payload)))
        self._outgoing.append(payload)

    def _flush(self) -> None:
        outgoing, self._outgoing = self._outgoing, []
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(outgoing))

    def connection_lost(self, exc) -> None:
        self.transport = None
        self._outgoing = []
        self._on_lost(exc)
