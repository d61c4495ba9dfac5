"""A front's uvicorn server, whose SIGTERM drains before it stops.

uvicorn's own SIGTERM stops accepting at once (new connections then wait in the shared socket's
backlog for nobody) and keeps gRPC serving, and ready, until every HTTP request has ended. Under
Kubernetes that is the wrong way round: readiness must fail at once so that traffic moves away,
and what is in flight must finish within terminationGracePeriodSeconds. So the first SIGTERM (or
SIGINT) begins the drain (service/front/protocols/drain.py): readiness reads false on every
protocol and new requests get 503 or UNAVAILABLE, synchronously in the signal handler. The
front keeps accepting meanwhile, so a new connection gets its 503 rather than a stall, and
stops (uvicorn's own shutdown, then gRPC's with what is left of the grace for its calls) once
no HTTP request is in flight or the grace (--shutdown-grace) is over. A second SIGINT stops at
once, as with uvicorn. Its ticks also hand the front's freed heap memory back to the kernel once
a TRIM_PERIOD_S (service/shared/heap_tuning.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time

import uvicorn

from service.front.engine_client import EngineClient
from service.front.protocols.drain import Drain
from service.shared.heap_tuning import TRIM_PERIOD_S, release_freed_memory

log = logging.getLogger(__name__)
# Seconds uvicorn's shutdown waits for what the drain left running before cancelling it.
_AFTER_GRACE_S = 1.0


class DrainingServer(uvicorn.Server):
    _clock = staticmethod(time.monotonic)

    def __init__(self, config: uvicorn.Config, drain: Drain, client: EngineClient):
        config.timeout_graceful_shutdown = _AFTER_GRACE_S
        super().__init__(config)
        self.drain = drain
        self.client = client
        self._next_trim = 0.0  # the first tick trims

    @contextlib.contextmanager
    def capture_signals(self):
        """The loop's own signal handling, not uvicorn's signal.signal: handle_exit then runs as
        a loop callback between others, not inside whatever code the signal interrupted (it
        logs, and the logging lock may be held by that code)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)

    def handle_exit(self, sig: int, frame) -> None:
        if not self.drain.active:
            self.client.draining = True
            self.drain.begin()
            # The clock is CLOCK_MONOTONIC, which every process of the host shares: a test
            # compares it with when it sent the signal.
            log.info(
                "draining (not ready) since monotonic %.6f: requests in flight get %g s",
                self.drain.began,
                self.drain.grace_s,
            )
        elif sig == signal.SIGINT:  # a second Ctrl-C: stop now
            self.should_exit = self.force_exit = True

    def _in_flight(self) -> bool:
        state = self.server_state
        return bool(state.tasks) or any(
            getattr(connection, "answering_natively", False) for connection in state.connections
        )

    async def on_tick(self, counter: int) -> bool:
        now = self._clock()
        if now >= self._next_trim:
            self._next_trim = now + TRIM_PERIOD_S
            await release_freed_memory()
        if self.drain.active and not self.should_exit:
            self.should_exit = not self._in_flight() or self.drain.remaining_s() == 0
        return await super().on_tick(counter)
