"""Where a request's outputs go in the engine: the room its front reserved in its arena.

The native host writes an output straight into the room when its upper bound fits there
(OutputRoom.destinations, given to Method.execute), so the front answers from the bytes the
execute itself produced: one copy out of the program's planned memory, not one into a buffer
of the host's and a second one here. An image-sized output pays that copy per request on the
engine's one thread, which serves every front (a request run in a worker thread is written
there by that thread). Outputs the host returned as arrays (batched or priority-queued
requests, unknown bounds) are copied into what is left of the room (place).
"""

from __future__ import annotations

import math

import numpy as np

from service.shared.arena import Region, align_up


class OutputRoom:
    """A front's room for one request's outputs, `room` bytes at `at` in its arena's region."""

    __slots__ = ("region", "start", "at", "end", "offsets")

    def __init__(self, region: Region, at: int, room: int):
        self.region = region
        self.start = self.at = at  # self.at: where what is not written yet may start
        self.end = at + room
        self.offsets: dict[str, int] = {}  # outputs given a destination, by name

    def destinations(self, names: list[str | None], most_bytes: list) -> list | None:
        """Per output of the method (its name, None if not asked for, the most bytes it can
        take), a window of the room, 256-byte aligned, for the host to write it into, else
        None; None when there is none at all. An output whose upper bound is unknown or does
        not fit in what is left comes back as an array (place copies it, or sends it inline)."""
        found = None
        at = self.start
        self.offsets.clear()
        for index, name in enumerate(names):
            most = most_bytes[index]
            if name is None or not most or not math.isfinite(most):
                continue
            start = align_up(at)
            if start + most > self.end:
                continue
            found = found or [None] * len(names)
            found[index] = self.region.array(start, np.uint8, (most,))
            self.offsets[name] = start
            at = start + most
        self.at = at
        return found


def place(room: OutputRoom, outputs: list[tuple], written=()) -> list[tuple]:
    """The outputs, (name, datatype, array or the host's WrittenOutput) each, as the answer
    describes them: (name, datatype, shape, offset in the arena, inline bytes or None). Arrays
    are copied into the room, 256-byte aligned; one that does not fit travels inline (only a
    program whose outputs outgrow its own upper bounds does that). Outputs `written` into
    client shared memory travel without bytes (offset -1)."""
    placed = []
    for name, datatype, array in outputs:
        shape = list(array.shape)
        if name in written:
            placed.append((name, datatype, shape, -1, None))
        elif name in room.offsets:  # the host wrote it into the room
            placed.append((name, datatype, shape, room.offsets[name], None))
        else:
            start = align_up(room.at)
            if start + array.nbytes <= room.end:
                room.region.array(start, array.dtype, array.shape)[...] = array
                placed.append((name, datatype, shape, start, None))
                room.at = start + array.nbytes
            else:
                placed.append((name, datatype, shape, 0, array.tobytes()))
    return placed
