"""A front's gate before the engine's bounded queues: refuses, without crossing to the engine,
what the engine would refuse.

Clients that send a refused request again at once (an impatient client ignores Retry-After) make
most requests of a flood refusals. Each refusal that crosses to the engine and back costs both
processes work that the execute serving the admitted requests must share cores with. So once
the engine has refused a request because a model method's queue is full (QueueFull), each front
refuses the next requests for that queue itself, with the engine's message and retry hint, and
lets one through for every place the queue's measured pace says has freed since: the queue
stays full and its instances busy, and the engine sees about one refusal per freed place instead
of one per retry. Once the queue as the engine last reported it would have drained with no
refusal since, the gate opens wholly; a new refusal closes it again. The engine stays the judge:
a request let through may still be refused there (another front took the place), which only
closes the gate again with fresher figures.

Who gets a freed place: the first request to arrive for it, except that the protocols (and
encodings) take turns. Retries come at very different rates through one front (a refused HTTP
request costs less than a refused gRPC call, so it is back sooner): first come alone would hand
nearly every place to the quickest to retry. So a place goes to a request of the protocol that
was let through least recently among those that asked lately (within the retry hint). Only
one place at a time waits for its turn, while the rest of the queue keeps the instances busy:
a protocol slow to come back still gets its share, and a second freed place goes to whoever
asks first, so no instance waits for a protocol gone quiet.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from service.errors import Busy, QueueFull


@dataclass(frozen=True)
class Refusal:
    """What to refuse a request with. A record rather than the exception: an exception raised
    from a local variable is held by its own traceback's frame, a reference cycle that would keep
    the request (and its tensors) until the garbage collector's next full pass."""

    message: str
    retry_after_s: float

    def error(self) -> Busy:
        return Busy(self.message, self.retry_after_s)


@dataclass
class _Closed:
    """One full queue as the engine last reported it, and who has had its places since."""

    since: float  # when the refusal arrived (the gate's clock)
    pace_s: float  # between requests leaving the queue
    drain_s: float  # until the requests queued then have left
    message: str
    retry_after_s: float
    let_through: int = 0  # places handed out since `since`
    # protocol -> when it last asked, and when it was last let through (kept across closings)
    asked: dict[str, float] = field(default_factory=dict)
    passed: dict[str, float] = field(default_factory=dict)

    def close(self, refusal: QueueFull, now: float) -> None:
        self.since, self.pace_s, self.drain_s = now, refusal.pace_s, refusal.drain_s
        self.message, self.retry_after_s = refusal.message, refusal.retry_after_s
        self.let_through = 0

    def opened(self, now: float) -> bool:
        return now - self.since >= self.drain_s

    def place_for(self, protocol: str, now: float) -> bool:
        """Whether a freed place is there for a request of `protocol` now."""
        free = int((now - self.since) / self.pace_s) - self.let_through
        if free <= 0:
            return False
        if free > 1:
            return True  # only one place at a time waits for a turn
        mine = self.passed.get(protocol, -math.inf)
        lately = now - self.retry_after_s
        return not any(
            self.passed.get(other, -math.inf) < mine
            for other, asked_at in self.asked.items()
            if asked_at >= lately and other != protocol
        )


class Gate:
    """One front's view of which model methods' queues are full. Not thread-safe: the front's
    event loop is its only user."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._closed: dict[tuple[str, str, str], _Closed] = {}

    @property
    def any_closed(self) -> bool:
        """Whether any queue's refusal is on record and its queue not drained yet. A drained
        record is forgotten here too, not only when its queue is asked for again (admit):
        after a flood on one model nobody may ask for it, and the record would keep the
        front's native path (EngineRequests.lane_link) closed for every model for good."""
        if self._closed:
            now = self._clock()
            for key in [key for key, closed in self._closed.items() if closed.opened(now)]:
                del self._closed[key]
        return bool(self._closed)

    def refused(self, refusal: QueueFull) -> None:
        """The engine refused a request: its queue is full as of now."""
        if refusal.pace_s <= 0:  # nothing executed yet: no pace to reopen by
            return
        key = (refusal.model, refusal.version, refusal.method)
        now = self._clock()
        closed = self._closed.get(key)
        if closed is None:
            closed = self._closed[key] = _Closed(now, 0.0, 0.0, "", 0.0)
        closed.close(refusal, now)

    def admit(self, model: str, version: str, method: str, protocol: str) -> Refusal | None:
        """None: the request may go to the engine (taking a freed place, if the queue is
        full); else the refusal to answer it with."""
        key = (model, version, method)
        closed = self._closed.get(key)
        if closed is None:
            return None
        now = self._clock()
        if closed.opened(now):
            del self._closed[key]
            return None
        closed.asked[protocol] = now
        if closed.place_for(protocol, now):
            closed.let_through += 1
            closed.passed[protocol] = now
            return None
        return Refusal(closed.message, closed.retry_after_s)

    def open_for(self, model: str, version: str, method: str) -> bool:
        """Whether no refusal of that queue is on record: admit() would let a request through
        as things are, taking no freed place."""
        return (model, version, method) not in self._closed

    def refuses(
        self, model: str, version: str, methods: Iterable[str], protocol: str
    ) -> Refusal | None:
        """The refusal for a request to `model` whose method is not known yet (it is in a body
        not read yet) when every one of the `methods` would refuse it now; takes no place."""
        now = self._clock()
        refusal = None
        for method in methods:
            closed = self._closed.get((model, version, method))
            if closed is None or closed.opened(now):
                return None
            closed.asked[protocol] = now
            if closed.place_for(protocol, now):
                return None
            refusal = refusal or Refusal(closed.message, closed.retry_after_s)
        return refusal
