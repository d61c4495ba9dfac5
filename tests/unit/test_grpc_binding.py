"""gRPC binding: large work leaves the event loop; the problem list of an error travels in
bounded trailing metadata, a busy refusal's retry hint in `retry-after`."""

import asyncio
import json
import threading

from service.errors import Busy, Invalid, Problem, QueueFull
from service.front.protocols.v2_grpc.binding import (
    OFF_LOOP_BYTES,
    PROBLEMS_METADATA_CHARS,
    off_loop,
    problems_metadata,
    refusal,
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


def test_a_busy_refusal_says_when_to_come_back_in_whole_seconds_as_rest_does():
    full = QueueFull(
        "model 'm' method 'forward' has 8 requests queued", "m", "1", "forward", 0.3, 2.4
    )
    details, trailers = refusal(full)
    assert details == "model 'm' method 'forward' has 8 requests queued (retry after 3 s)"
    assert trailers == (("retry-after", "3"),)
    assert refusal(Busy("restarting", retry_after_s=0.2))[1] == (("retry-after", "1"),)
    assert refusal(Invalid("bad")) == ("bad", ())
