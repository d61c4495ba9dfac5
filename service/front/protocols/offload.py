"""Runs the GIL-holding parts of large JSON requests in worker processes.

`json.loads`, and turning millions of numbers into lists and back, run in C without ever releasing
the GIL: in a thread they would still stop the event loop for as long as they take (measured here:
a 60 MB JSON tensor body held every other thread for 1.0 s), so health probes and every other
request would wait. Worker processes hold their own GIL; the server's side of a call is pickling
the body and the arrays, which is a copy (tens of milliseconds for the largest allowed body).
Small bodies are cheaper to handle inline than to ship: `parse`, `write` and `slice` decide by
the server's InlinePolicy (service/inline_policy.py), which holds every such threshold.

The workers are spawned (never forked: the server has native threads) on first use and replaced
if one dies; a call that lost its worker answers 503. They hold on to the memory of the largest
request they decoded (Python's allocator keeps its arenas), so once no call has come for
IDLE_S they exit, and the next large request spawns them again (about a second on 2 cores).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from service.errors import Unavailable
from service.ingest import child_guard
from service.inline_policy import InlinePolicy

log = logging.getLogger(__name__)
# Seconds without a call after which the workers exit.
IDLE_S = 60.0


def _worker_setup() -> None:
    """The server's own shutdown closes the pool; a Ctrl-C sent to the process group must not
    print a traceback from every worker, and a front killed outright takes its workers along."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    child_guard.die_with_parent(os.getppid())


class Offload:
    def __init__(
        self,
        workers: int | None = None,
        policy: InlinePolicy | None = None,
        idle_s: float = IDLE_S,
    ):
        self.workers = workers or max(1, min(4, os.cpu_count() or 1))
        self.policy = policy or InlinePolicy()
        self.idle_s = idle_s
        self._pool: ProcessPoolExecutor | None = None
        self._calls = 0  # in flight
        self._idle: asyncio.TimerHandle | None = None

    async def parse(self, function: Callable, text, *args):
        """function(text, *args): a JSON parse, inline for a small text."""
        if self.policy.parse_inline(len(text)):
            return function(text, *args)
        return await self.call(function, text, *args)

    async def write(self, elements: int, function: Callable, *args):
        """function(*args): a JSON answer of `elements` tensor values, inline when small."""
        if self.policy.write_inline(elements):
            return function(*args)
        return await self.call(function, *args)

    async def slice(self, nbytes: int, function: Callable, *args):
        """function(*args): work over `nbytes` of binary tensor data, in a thread when large."""
        if self.policy.slice_inline(nbytes):
            return function(*args)
        return await asyncio.to_thread(function, *args)

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_setup,
            )
        return self._pool

    async def call(self, function: Callable, *args):
        pool = self._executor()
        loop = asyncio.get_running_loop()
        self._calls += 1
        try:
            return await loop.run_in_executor(pool, function, *args)
        except BrokenProcessPool:
            log.error("a JSON worker process died; starting new ones")
            if self._pool is pool:
                self._pool = None
                pool.shutdown(wait=False, cancel_futures=True)
            raise Unavailable("the worker decoding this request stopped; retry") from None
        finally:
            self._calls -= 1
            if self._calls == 0:
                if self._idle is not None:
                    self._idle.cancel()
                self._idle = loop.call_later(self.idle_s, self._retire)

    def _retire(self) -> None:
        """The workers exit once idle (their memory with them); a new call spawns others."""
        self._idle = None
        if self._calls == 0 and self._pool is not None:
            pool, self._pool = self._pool, None
            pool.shutdown(wait=False)

    def close(self) -> None:
        """At shutdown: waits for the workers to exit, so their processes and the pool's
        semaphores are released before the server exits (not leaked to the resource tracker,
        which would warn about them); a decode still running finishes first."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
