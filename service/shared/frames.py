"""Small control messages between the fronts and the engine, over a Unix socket.

Messages are the records of messages.py, sent as tuples of plain values encoded with `marshal`
(both ends run the same interpreter, and it is several times faster than pickle for tuples of
numbers and strings), each framed by its length. Under load many requests are in flight at
once, so writes are gathered and sent once per turn of the event loop: one system call carries
dozens of descriptors instead of one each.
Anything else (errors, model descriptions) travels as a pickle inside a message.

Tensor bytes never travel here; messages only say where in the front's arena they are. The
engine's native lane speaks two struct-packed messages besides (lane_frames.py): a front sends
its requests that way when it can, and receives the lane's answers, as (LANE_DONE, id, payload).
"""

from __future__ import annotations

import asyncio
import marshal
import struct
from collections.abc import Callable

from service.shared import lane_frames

_LENGTH = struct.Struct("<I")
_DONE_TAG = bytes([lane_frames.DONE_TAG])

# Front -> engine
INFER, CANCEL, CALL, NOTE = 1, 2, 3, 4
# Engine -> front
DONE, RESULT = 11, 12
LANE_DONE = 14  # the lane's answer, as FrameProtocol delivers it: (LANE_DONE, id, payload)


class FrameProtocol(asyncio.Protocol):
    """Calls `on_message(message)` for each message received; `send` queues one to go out at the
    end of this loop turn. `on_lost(exc)` runs once when the connection ends."""

    def __init__(self, on_message: Callable, on_lost: Callable):
        self._on_message = on_message
        self._on_lost = on_lost
        self._buffer = bytearray()
        self._outgoing: list[bytes] = []
        self.transport: asyncio.Transport | None = None
        self._loop = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        self._loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        start, end = 0, len(buffer)
        messages = []
        while end - start >= 4:
            (length,) = _LENGTH.unpack_from(buffer, start)
            if end - start - 4 < length:
                break
            payload = buffer[start + 4 : start + 4 + length]
            if payload[:1] == _DONE_TAG:
                messages.append((LANE_DONE, lane_frames.request_id_of_answer(payload), payload))
            else:
                messages.append(marshal.loads(payload))
            start += 4 + length
        del buffer[:start]
        for message in messages:
            self._on_message(message)

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
