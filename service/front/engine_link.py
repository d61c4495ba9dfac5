"""A front's connection to the engine: its socket, the arena and control page that come with it,
and the requests and calls waiting on answers (service/front/engine_client.py drives it).

When the connection is lost, everything waiting on it fails with the client's EngineDown at once
and its slots are abandoned with the arena, never reused: the old engine may still write them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from service.dtypes import BY_DATATYPE
from service.shared import frames, lane_frames, messages
from service.shared.arena import Arena, Lease, align_up
from service.shared.handshake import CONTROL

_SCALAR_BYTES = 8  # int, float and bool outputs travel as one 8-byte value


class Outage:
    """When the engine went away and how long its last start took, for Retry-After."""

    def __init__(self):
        self.since = time.monotonic()  # the front starts before the engine answers
        self.last_s = 0.0

    def retry_after_s(self) -> float:
        return max(1.0, self.last_s - (time.monotonic() - self.since))

    def ended(self) -> None:
        self.last_s = time.monotonic() - self.since

    def began(self) -> None:
        self.since = time.monotonic()


class Pending:
    __slots__ = ("future", "leases", "lane")

    def __init__(self, future: asyncio.Future, leases: list[Lease]):
        self.future = future
        self.leases = leases
        self.lane = None  # sent as a lane request: how its answer reads (engine_requests.LanePlan)

    def settle(self) -> None:
        for lease in self.leases:
            lease.release()
        self.leases = []


class Link:
    """One connection to the engine, with the arena and control page that go with it."""

    def __init__(self, client, arena: Arena, control):
        self.client = client
        self.arena = arena
        self.control = control
        self.pending: dict[int, Pending] = {}
        # Requests the fronts' native path took (service/front/native_path.py): their answers go
        # to a callback, `relay(message)` with messages.Done or messages.LaneDone as received,
        # or None when the engine went away.
        self.relays: dict[int, Callable] = {}
        self.calls: dict[int, asyncio.Future] = {}
        self.protocol = frames.FrameProtocol(self._received, self._lane_answered, self._lost)
        self.alive = True

    def generation(self) -> tuple[int, bool]:
        generation, ready, _ = CONTROL.unpack_from(self.control, 0)
        return generation, bool(ready)

    def serving(self) -> bool:
        return bool(CONTROL.unpack_from(self.control, 0)[2])

    def _lane_answered(self, key: int, payload: bytes) -> None:
        """The engine's lane answered request `key`: most often one the native path took."""
        relay = self.relays.pop(key, None)
        if relay is not None:
            relay(messages.lane_done((frames.LANE_DONE, key, payload)))
            return
        pending = self.pending.pop(key, None)
        if pending is None:
            return
        if pending.future.done():  # cancelled: nobody waits, only the slots remain
            pending.settle()
            return
        lane = pending.lane
        in_region = lane_frames.IN_REGION  # -1 below: in the client's region, as Python says
        outputs = [
            (*lane.outputs[index], list(shape), -1 if offset == in_region else offset, None)
            for index, offset, shape in lane_frames.read_answer(payload)
        ]
        pending.future.set_result(messages.Done(frames.DONE, key, True, (lane.version, outputs)))

    def _received(self, received: tuple) -> None:
        message = messages.read(received)
        kind = message.kind
        if kind == frames.DONE:
            key = message.request_id
            relay = self.relays.pop(key, None)
            if relay is not None:
                relay(message)
                return
            pending = self.pending.pop(key, None)
            if pending is None:
                return
            if pending.future.done():  # cancelled: nobody waits, only the slots remain
                pending.settle()
            else:
                pending.future.set_result(message)
        elif kind == frames.RESULT:
            future = self.calls.pop(message.call_id, None)
            if future is not None and not future.done():
                future.set_result(message)

    def _lost(self, exc) -> None:
        self.alive = False
        for relay in self.relays.values():
            relay(None)
        for pending in self.pending.values():
            # The slots are abandoned with the arena, never reused: the engine may still write.
            if not pending.future.done():
                pending.future.set_exception(self.client.down())
        for future in self.calls.values():
            if not future.done():
                future.set_exception(self.client.down())
        self.relays.clear()
        self.pending.clear()
        self.calls.clear()
        self.client._link_lost(self)


def output_bytes(entry, method: str, rows: int | None) -> int:
    """Room for a method's outputs at their upper bounds (per request rows when batched)."""
    total = 0
    for spec in entry.signatures[method].outputs:
        if spec.tag != "Tensor":
            total += align_up(_SCALAR_BYTES)
            continue
        dtype = BY_DATATYPE.get(spec.datatype)
        if dtype is None:
            continue
        count = 1
        dims = spec.shape[1:] if rows is not None and spec.shape else spec.shape
        for dim in dims:
            count *= dim
        total += align_up(count * dtype.itemsize * (rows if rows is not None else 1))
    return total
