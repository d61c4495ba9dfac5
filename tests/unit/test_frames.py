"""The front's side of the engine socket (service/shared/frames.py): however the bytes of a
stream of messages are cut into reads, each marshalled message and each lane answer is handed
over once, whole, in the order sent, and nothing is handed over before it is whole."""

import marshal
import random
import struct

from service.shared import frames, lane_frames, messages

_LENGTH = struct.Struct("<I")


def _lane_answer(request_id: int, shape: tuple) -> bytes:
    head = struct.pack("<BBHIQ", lane_frames.DONE_TAG, 1, 0, 0, request_id)
    return head + struct.pack("<IIQ", 0, len(shape), 256) + struct.pack(f"<{len(shape)}q", *shape)


def _stream() -> tuple[bytes, list]:
    sent, parts = [], []
    for i in range(200):
        if i % 3 == 0:
            message = tuple(messages.Result(frames.RESULT, i, True, b"x" * (i * 37 % 5000)))
            payload = marshal.dumps(message)
            sent.append(("message", message))
        else:
            payload = _lane_answer(1000 + i, (2, i % 7 + 1))
            sent.append(("lane", (1000 + i, payload)))
        parts.append(_LENGTH.pack(len(payload)) + payload)
    return b"".join(parts), sent


def test_messages_are_handed_over_whole_and_in_order_however_the_reads_cut_them():
    stream, sent = _stream()
    rng = random.Random(7)
    for reads in ([stream], [stream[i : i + 1] for i in range(len(stream))], None):
        if reads is None:  # reads of random sizes, some cutting a length prefix in two
            reads, at = [], 0
            while at < len(stream):
                size = rng.choice((1, 3, 5, 64, 700, 9000))
                reads.append(stream[at : at + size])
                at += size
        got: list = []
        protocol = frames.FrameProtocol(
            lambda m, got=got: got.append(("message", m)),
            lambda request_id, payload, got=got: got.append(("lane", (request_id, payload))),
            lambda exc: None,
        )
        for data in reads:
            protocol.data_received(data)
        assert got == sent
        for request_id, payload in (item for kind, item in got if kind == "lane"):
            assert type(payload) is bytes  # read by the native path as it is, not copied again
            assert lane_frames.request_id_of_answer(payload) == request_id
