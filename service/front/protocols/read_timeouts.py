"""How long a client may take to send a request's head and, between two reads, its body.

uvicorn has neither: a client that sends half a head, or a head declaring a large body and then
nothing, holds its connection (and what its body's reader took) for as long as it likes. These
are nginx's client_header_timeout and client_body_timeout, with nginx's defaults (60 s each):
the head must be whole within HEADER_TIMEOUT_S of its first byte (or of the connection, for its
first request), and a body must progress at least once every BODY_TIMEOUT_S. A request that
misses either is answered 408 in the error shape and its connection closed. Idle keep-alive
connections between requests are uvicorn's (--timeout-keep-alive, 5 s).

The same clock keeps uvicorn's keep-alive timeout for connections whose requests the native path
answers (the idle phase): uvicorn arms and cancels a timer of its own per request, which cost a
front more than a microsecond per small request (timer handles made, started, stopped, closed).

One timer per connection at most: a phase that ends only marks the clock stopped, and the timer,
when it fires, looks at the phase it finds and arms itself again for what is left of it, so a
request costs no timer of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from service import rules

HEADER_TIMEOUT_S = 60.0
BODY_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ReadTimeouts:
    header_s: float
    body_s: float


def timeout_answer(what: str, timeouts: ReadTimeouts) -> bytes:
    """The whole 408 answer, connection closing, in the one error shape."""
    if what == "head":
        message = (
            f"the request's head did not arrive whole within {timeouts.header_s:g} s "
            f"(--header-timeout)"
        )
    else:
        message = f"the request's body did not progress for {timeouts.body_s:g} s (--body-timeout)"
    body = json.dumps(
        {
            "error": message,
            "problems": [{"file": None, "rule": rules.REQUEST_TIMEOUT, "message": message}],
        }
    ).encode()
    return (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
        b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )


HEAD, BODY, IDLE = "head", "body", "idle"


class ReadClock:
    """The read deadline of one connection; `owner.timed_out(phase)` when it passes. The owner
    has the event loop (`loop`), the read timeouts (`timeouts`) and uvicorn's keep-alive timeout
    (`timeout_keep_alive`)."""

    __slots__ = ("_owner", "_phase", "_since", "_timer", "in_body")

    def __init__(self, owner):
        self._owner = owner
        self._phase: str | None = None
        self._since = 0.0
        self._timer = None
        self.in_body = False  # whether bytes that come move the deadline (progressed)

    def head_begins(self) -> None:
        self._start(HEAD, self._owner.timeouts.header_s)

    def body_begins(self) -> None:
        self._start(BODY, self._owner.timeouts.body_s)

    def idle_begins(self) -> None:
        """An answer is written and the connection waits for its next request."""
        self._start(IDLE, self._owner.timeout_keep_alive)

    def progressed(self) -> None:
        """Bytes of the body came: its deadline moves (a head's does not: it is one deadline).
        Called only while `in_body`: a request's other reads cost no call."""
        if self._phase == BODY:
            self._since = self._owner.loop.time()

    def stop(self) -> None:
        self._phase = None
        self.in_body = False

    def _limit(self) -> float:
        phase = self._phase
        if phase == IDLE:
            return self._owner.timeout_keep_alive
        timeouts = self._owner.timeouts
        return timeouts.header_s if phase == HEAD else timeouts.body_s

    def _start(self, phase: str, limit: float) -> None:
        loop = self._owner.loop
        self._phase, self._since = phase, loop.time()
        self.in_body = phase == BODY
        deadline, timer = self._since + limit, self._timer
        if timer is None:
            self._timer = loop.call_at(deadline, self._fire)
        elif timer.when() > deadline:
            timer.cancel()  # a phase with a shorter limit than the one it was armed for
            self._timer = loop.call_at(deadline, self._fire)

    def _fire(self) -> None:
        self._timer = None
        if self._phase is None:
            return
        deadline = self._since + self._limit()
        if deadline > self._owner.loop.time():
            self._timer = self._owner.loop.call_at(deadline, self._fire)
            return
        phase = self._phase
        self.stop()
        self._owner.timed_out(phase)
