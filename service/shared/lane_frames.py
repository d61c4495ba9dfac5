"""The fixed-layout messages of the engine's native lane (runtime_ext/lane/wire.h, which
defines the layout): a request a front checked against a route of its model table, the
engine's answer to it, and a front's cancel of any request (a lane request waiting for an
instance is dropped by the lane's link thread itself; every other cancel reaches Python).
Struct-packed rather than marshalled so that the engine's link threads read and answer them
without Python; every other message stays a marshal tuple (frames.py).

A request the lane declines reaches the engine's Python side as this message, which
read_request turns back into what it says. A request may name tensors in clients' shared memory
regions (references: tensor index, whether an output, region name, offset, byte size); the lane
binds those where they lie (runtime_ext/lane/shm_regions.h) and answers such an output with the
offset IN_REGION.
"""

from __future__ import annotations

import struct

import etrt_front

from service.shared.limits import MAX_DIMS, MAX_INPUTS, MAX_OUTPUTS

INFER_TAG: int = etrt_front.LANE_INFER_TAG
DONE_TAG: int = etrt_front.LANE_DONE_TAG
CANCEL_TAG: int = etrt_front.LANE_CANCEL_TAG
IN_REGION: int = etrt_front.LANE_IN_REGION  # an answer's offset: written into its region
_MAX_REFS: int = etrt_front.LANE_MAX_SHM_REFS

_REQUEST = struct.Struct("<BBHIQQQQQ")  # tag, inputs, 0, route, id, generation, room, size, outputs
_INPUT = struct.Struct("<QII")  # offset, ndim, 0
_REF = struct.Struct("<IBBHQQ")  # tensor, 1 for an output, 0, name bytes, offset, byte size
_ANSWER = struct.Struct("<BBHIQ")  # tag, outputs, 0, 0, id
# An answer's request id, read alone where it is (frames.FrameProtocol, once per answer).
ANSWER_ID, ANSWER_ID_AT = struct.Struct("<Q"), _ANSWER.size - 8
_OUTPUT = struct.Struct("<IIQ")  # index, ndim, offset
_CANCEL = struct.Struct("<BBHIQ")  # tag, why (1: the deadline passed), 0, 0, id
_DIMS = [struct.Struct(f"<{n}q") for n in range(MAX_DIMS + 1)]
_SIZES = {
    "request": (_REQUEST.size, etrt_front.LANE_REQUEST_HEAD),
    "input": (_INPUT.size, etrt_front.LANE_INPUT_HEAD),
    "answer": (_ANSWER.size, etrt_front.LANE_ANSWER_HEAD),
    "output": (_OUTPUT.size, etrt_front.LANE_OUTPUT_HEAD),
    "shm_ref": (_REF.size, etrt_front.LANE_SHM_REF_HEAD),
    "cancel": (_CANCEL.size, etrt_front.LANE_CANCEL_SIZE),
}
_DRIFTED = {part: sizes for part, sizes in _SIZES.items() if sizes[0] != sizes[1]}
if _DRIFTED:  # the modules were built from another wire.h than these layouts describe
    raise ImportError(f"lane message layouts disagree with the native modules' wire.h: {_DRIFTED}")


def fits(inputs: list, output_count: int, refs: list = ()) -> bool:
    """Whether a request of these inputs ((offset, shape) each) to a method of `output_count`
    outputs, with these shared memory references (as request() takes them), can travel as a
    lane request."""
    return (
        len(inputs) <= MAX_INPUTS
        and output_count <= MAX_OUTPUTS
        and all(len(shape) <= MAX_DIMS for _, shape in inputs)
        and len(refs) <= _MAX_REFS
        and all(len(ref[2].encode("utf-8", "surrogatepass")) <= 0xFFFF for ref in refs)
    )


def request(
    route: int,
    request_id: int,
    generation: int,
    room_offset: int,
    room_size: int,
    outputs: int,
    inputs: list,
    refs: list = (),
) -> bytes:
    """`outputs`: bit i set for output i asked for; `inputs`: (offset in the arena, shape);
    `refs`: (tensor index, whether an output, region name, offset, byte size) of each tensor in
    a client's shared memory region (an input named there has offset 0 in `inputs`)."""
    parts = [
        _REQUEST.pack(
            INFER_TAG, len(inputs), len(refs), route, request_id, generation, room_offset,
            room_size, outputs,
        )
    ]  # fmt: skip
    for offset, shape in inputs:
        parts.append(_INPUT.pack(offset, len(shape), 0))
        parts.append(_DIMS[len(shape)].pack(*shape))
    for tensor, output, region, offset, byte_size in refs:
        name = region.encode("utf-8", "surrogatepass")
        parts.append(_REF.pack(tensor, int(output), 0, len(name), offset, byte_size))
        parts.append(name)
    return b"".join(parts)


def read_request(payload: bytes) -> tuple[int, int, int, int, int, int, list, list]:
    """(route, request id, generation, room offset, room size, outputs mask, [(offset, shape)],
    [references as request() takes them])."""
    _, count, ref_count, route, request_id, generation, room, size, outputs = _REQUEST.unpack_from(
        payload, 0
    )
    at, inputs, refs = _REQUEST.size, [], []
    for _ in range(count):
        offset, ndim, _ = _INPUT.unpack_from(payload, at)
        at += _INPUT.size
        inputs.append((offset, _DIMS[ndim].unpack_from(payload, at)))
        at += 8 * ndim
    for _ in range(ref_count):
        tensor, output, _, name_bytes, offset, byte_size = _REF.unpack_from(payload, at)
        at += _REF.size
        region = payload[at : at + name_bytes].decode("utf-8", "surrogatepass")
        at += name_bytes
        refs.append((tensor, bool(output), region, offset, byte_size))
    if at != len(payload):
        raise ValueError("a lane request longer than its fields")
    return route, request_id, generation, room, size, outputs, inputs, refs


def cancel(request_id: int, deadline: bool = False) -> bytes:
    """The cancel of request `request_id`: its client went away before its answer, or stopped
    waiting because the request's deadline passed (`deadline`)."""
    return _CANCEL.pack(CANCEL_TAG, int(deadline), 0, 0, request_id)


def read_cancel(payload: bytes) -> tuple[int, bool]:
    """(the request id a cancel names, whether its deadline passed)."""
    _, why, _, _, request_id = _CANCEL.unpack(payload)
    return request_id, why == 1


def request_id_of_answer(payload: bytes) -> int:
    return ANSWER_ID.unpack_from(payload, ANSWER_ID_AT)[0]


def read_answer(payload: bytes) -> list[tuple[int, int, tuple]]:
    """The outputs written: (index, offset in the arena, shape) each."""
    count = payload[1]
    at, outputs = _ANSWER.size, []
    for _ in range(count):
        index, ndim, offset = _OUTPUT.unpack_from(payload, at)
        at += _OUTPUT.size
        outputs.append((index, offset, _DIMS[ndim].unpack_from(payload, at)))
        at += 8 * ndim
    return outputs
