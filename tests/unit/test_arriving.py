"""A binary body's memory follows the bytes that arrived (v2_rest/transport.read_aligned_body):
taken at 1 MiB once the header is in, doubled as the body outgrows it, the bytes kept; a client
address's bodies still arriving are capped (service/front/protocols/arriving.py)."""

import asyncio
import os

import pytest

from service.errors import Busy
from service.front.protocols.arriving import ArrivingBodies
from service.front.protocols.v2_rest.transport import FIRST_STEP, read_aligned_body

MiB = 1 << 20


def _scope(length: int) -> dict:
    return {"headers": [(b"content-length", str(length).encode())], "client": ("10.0.0.7", 5)}


def _receive(body: bytes, chunk: int):
    pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)]

    async def receive():
        piece = pieces.pop(0)
        return {"type": "http.request", "body": piece, "more_body": bool(pieces)}

    return receive


def _memory(sizes: list):
    def memory(nbytes: int, align_at: int):
        sizes.append(nbytes)
        return memoryview(bytearray(nbytes)), None

    return memory


def test_the_memory_grows_with_the_bytes_that_came_and_keeps_them():
    body = os.urandom(10 * MiB + 123)
    sizes = []
    got, _ = asyncio.run(
        read_aligned_body(
            _scope(len(body)), _receive(body, 64 * 1024), 1 << 30, "a body", 100, _memory(sizes)
        )
    )
    assert bytes(got) == body
    assert sizes == [FIRST_STEP, 2 * MiB, 4 * MiB, 8 * MiB, len(body)]


def test_a_client_past_its_cap_is_told_to_retry_and_holds_nothing_after():
    arriving = ArrivingBodies(per_client=3 * MiB)
    arriving.hold("10.0.0.7", MiB)  # another of its bodies, still arriving
    body = os.urandom(4 * MiB)
    with pytest.raises(Busy, match="--max-client-arriving-bytes"):
        asyncio.run(
            read_aligned_body(
                _scope(len(body)),
                _receive(body, MiB),
                1 << 30,
                "a body",
                100,
                _memory([]),
                arriving,
            )  # fmt: skip
        )
    assert arriving.held("10.0.0.7") == MiB
    arriving.drop("10.0.0.7", MiB)
    assert arriving.held("10.0.0.7") == 0
    # Another client is not limited by this one's bodies.
    arriving.hold("10.0.0.8", 3 * MiB)
