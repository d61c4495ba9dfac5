"""Python's requests waiting for an instance of a method, in the method gate's one queue.

A method's instances have one owner, its gate (runtime_ext/lane/method_gate.h), which the
engine's native lane and this process's schedulers both claim from and give back to. A request
that finds none free queues at the gate beside the lane's, in arrival order; the instance given
back next is claimed for it there and delivered here (runtime_ext/lane/handoffs.h: an eventfd
the event loop reads), so a request waits on the event loop, holding no thread.
"""

from __future__ import annotations

import asyncio
import itertools

CLOSED = -1  # the index a waiter gets when its gate closed first


class Handoffs:
    """One per process: every gate's waiters from this process's event loop."""

    def __init__(self, ethost):
        self._native = ethost.Handoffs()
        self._tokens = itertools.count(1)  # 0 stands for the lane's waiters at the gate
        self._waiting: dict[int, tuple[asyncio.Future, object]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    async def claim(self, gate, timeout_s: float | None = None) -> int:
        """The index of an instance of `gate`'s, claimed for the caller: one free now if nobody
        is queued, else the next one given back. TimeoutError past `timeout_s` (None: no limit)
        and CancelledError leave nothing claimed. CLOSED when the gate closed first."""
        index = gate.claim()
        if index >= 0:
            return index
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new loop (tests run several): it reads the eventfd now
            loop.add_reader(self._native.fd, self._drain)
            self._loop = loop
        token = next(self._tokens)
        future = loop.create_future()
        self._waiting[token] = (future, gate)
        gate.wait(self._native, token)
        try:
            if timeout_s is None:
                return await future
            return await asyncio.wait_for(future, max(timeout_s, 0.0))
        except BaseException:
            self._abandon(token, future, gate)
            raise

    def _abandon(self, token: int, future: asyncio.Future, gate) -> None:
        """The waiter gave up: out of the queue, or, where an instance was claimed for it
        already, that instance given back (now, or once it is drained)."""
        if gate.forget(token):
            self._waiting.pop(token, None)
            return
        if not future.done():
            future.cancel()  # _drain gives it back
        elif not future.cancelled() and future.exception() is None and future.result() >= 0:
            gate.release(future.result())

    def _drain(self) -> None:
        for token, index in self._native.drain():
            future, gate = self._waiting.pop(token, (None, None))
            if future is None:
                continue
            if future.done():  # given up meanwhile
                if index >= 0:
                    gate.release(index)
            else:
                future.set_result(index)


_shared: Handoffs | None = None


def shared(ethost) -> Handoffs:
    """This process's Handoffs."""
    global _shared
    if _shared is None:
        _shared = Handoffs(ethost)
    return _shared
