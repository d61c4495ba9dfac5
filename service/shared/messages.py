"""The messages fronts and the engine exchange besides the lane's two (lane_frames.py): one typed
record per kind, each field named. On the socket a message is the record's plain tuple, marshalled
(frames.py: several times faster than pickle for numbers and strings, and both ends run the same
interpreter); `read` turns a received tuple back into its record, so no side reads a field by
its position. Errors and the typed call records (contract.py) travel pickled inside a field.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

from service.shared.frames import CALL, DONE, INFER, LANE_DONE, NOTE, RESULT


class Infer(NamedTuple):
    """A request the front checked (or left for the engine to judge), its tensors in the arena."""

    kind: int  # INFER
    request_id: int  # the front's key for the answer
    model: str
    version: str | None
    method: str
    # (name, datatype, shape, where): an offset in the front's arena, or for a tensor in a
    # client's shared memory region (region, byte size, offset)
    inputs: list
    outputs: list[str] | None  # the outputs asked for; None for all
    room_offset: int  # where the outputs may be written in the arena
    room_size: int
    timeout_s: float | None
    client_id: str | None  # the client's own request id
    parameters: bytes | None  # pickled, None when there are none
    checked_at: int | None  # the model table generation the front checked it against
    shared_memory: tuple | None  # the client's shared memory references (shm/refs.to_wire)


class Cancel(NamedTuple):
    """The client went away: the engine need not finish the request. It travels as the lane's
    fixed-layout cancel (lane_frames.cancel), which the lane reads without Python; the engine
    hands Python this record of it."""

    kind: int  # CANCEL
    request_id: int
    deadline: bool  # its deadline passed (else its client went away)


class Call(NamedTuple):
    """One of the calls a front may make (contract.py), answered by a Result."""

    kind: int  # CALL
    call_id: int
    call: bytes  # the pickled call record


class Note(NamedTuple):
    """Something a front tells the engine without waiting for an answer (contract.py's notes)."""

    kind: int  # NOTE
    note: bytes  # the pickled note record


class Done(NamedTuple):
    """The engine's answer to an Infer (or to a lane request it did not answer natively)."""

    kind: int  # DONE
    request_id: int
    ok: bool
    # ok: (version, [(name, datatype, shape, offset, inline bytes or None)]): offset -1 for an
    # output written to the client's shared memory; else the pickled error
    payload: object


class LaneDone(NamedTuple):
    """The engine's native lane's answer to a lane request (frames.FrameProtocol hands over its
    request id and payload): its payload is read with lane_frames.read_answer."""

    kind: int  # LANE_DONE
    request_id: int
    payload: bytes


class Result(NamedTuple):
    """The engine's answer to a Call."""

    kind: int  # RESULT
    call_id: int
    ok: bool
    payload: bytes  # the pickled answer, or the pickled error


def _maker(record):
    """Makes a `record` from a tuple of its fields in C (no Python frame, as NamedTuple's _make
    has): a front reads one message per request. The field count is read's to check."""
    return partial(tuple.__new__, record)


_RECORDS = {
    kind: (_maker(record), len(record._fields))
    for kind, record in (
        (INFER, Infer),
        (CALL, Call),
        (NOTE, Note),
        (DONE, Done),
        (LANE_DONE, LaneDone),
        (RESULT, Result),
    )
}
lane_done = _maker(LaneDone)  # (LANE_DONE, request id, payload) as the front's Link reads it


def read(message: tuple) -> NamedTuple:
    """The record a received tuple is; ValueError for a kind this contract does not have."""
    found = _RECORDS.get(message[0])
    if found is None:
        raise ValueError(f"a message of unknown kind {message[0]!r}")
    make, fields = found
    if len(message) != fields:
        raise ValueError(f"a message of kind {message[0]} with {len(message)} fields")
    return make(message)
