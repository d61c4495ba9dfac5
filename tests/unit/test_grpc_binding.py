"""gRPC binding: large work leaves the event loop; the problem list of an error travels in
bounded trailing metadata."""

import asyncio
import json
import threading

from service.errors import Invalid, Problem
from service.protocols.v2_grpc.binding import (
    OFF_LOOP_BYTES,
    PROBLEMS_METADATA_CHARS,
    off_loop,
    problems_metadata,
)


def test_only_large_work_leaves_the_event_loop():
    async def main():
        return (
            threading.get_ident(),
            await off_loop(OFF_LOOP_BYTES - 1, threading.get_ident),
            await off_loop(OFF_LOOP_BYTES, threading.get_ident),
        )

    loop_thread, small, large = asyncio.run(main())
    assert small == loop_thread != large


def test_problems_metadata_stays_under_the_clients_limit():
    many = Invalid("refused", [Problem(f"f{i}.ptd", "data.invalid", "x" * 200) for i in range(100)])
    [(key, text)] = problems_metadata(many)
    assert key == "etrt-problems" and 0 < len(text) <= PROBLEMS_METADATA_CHARS
    assert 5 < len(json.loads(text)) < 100
    assert problems_metadata(Invalid("no problems")) == ()
