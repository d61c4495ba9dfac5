"""Drops the work of a request whose client went away.

ASGI servers do not cancel a handler when its client disconnects; they only answer the next
receive() with http.disconnect. A request queued for a batch would then still be executed for
nobody. Once a request's body has been read, the only message left to receive is that
disconnect, so waiting for it beside the work tells when to cancel the work (the scheduler takes
a cancelled request out of its queue before it executes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client closed the connection before the answer was ready; nobody reads one."""


async def _disconnected(receive: Callable[[], Awaitable[dict]]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(receive: Callable[[], Awaitable[dict]], work: Awaitable[T]) -> T:
    """The result of `work`, or ClientDisconnected (with `work` cancelled) if the client goes
    away first. Call only after the request body has been read."""
    task = asyncio.ensure_future(work)
    watcher = None
    try:
        # One turn of the loop first: work that never waits (a small program executed inline)
        # is done by then and needs no watcher task, which costs about as much as such an
        # execute.
        await asyncio.sleep(0)
        if not task.done():
            watcher = asyncio.ensure_future(_disconnected(receive))
            await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        if watcher is not None:
            watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    raise ClientDisconnected()
