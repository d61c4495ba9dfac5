"""Drops the work of a request whose client went away.

ASGI servers do not cancel a handler when its client disconnects; they only answer the next
receive() with http.disconnect. A request queued for a batch would then still be executed for
nobody. Once a request's body has been read, the only message left to receive is that
disconnect, so waiting for it beside the work tells when to cancel the work (the scheduler takes
a cancelled request out of its queue before it executes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from service.errors import clip

T = TypeVar("T")
log = logging.getLogger(__name__)


class ClientDisconnected(Exception):
    """The client closed the connection before the answer was ready; nobody reads one."""


# A request still running after this long gets a watcher for its client's disconnect; shorter
# ones (a small program's round trip to the engine, even under load) never pay for one, and a
# request queued longer is still dropped long before its turn comes.
WATCH_AFTER_S = 0.05


def log_aborted(scope: dict) -> None:
    """The one log line of a request whose client went away: the client's doing, so INFO."""
    log.info(
        "request method=%s path=%s outcome=aborted (the client disconnected)",
        scope.get("method"),
        clip(scope.get("path", "")),
    )


async def _disconnected(receive: Callable[[], Awaitable[dict]]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _cancel_on_disconnect(receive, handler: asyncio.Task, gone: list) -> None:
    await _disconnected(receive)
    gone.append(True)
    handler.cancel()


async def unless_disconnected(receive: Callable[[], Awaitable[dict]], work: Awaitable[T]) -> T:
    """The result of `work`, or ClientDisconnected (with `work` cancelled) if the client goes
    away first. Call only after the request body has been read.

    Work is awaited in the calling task itself; only work still running after WATCH_AFTER_S gets
    a watcher task, which cancels the caller on a disconnect. Two tasks per request would cost
    about as much as a small program's whole round trip.
    """
    loop = asyncio.get_running_loop()
    handler = asyncio.current_task()
    gone: list = []
    watcher: list[asyncio.Task] = []
    timer = loop.call_later(
        WATCH_AFTER_S,
        lambda: watcher.append(loop.create_task(_cancel_on_disconnect(receive, handler, gone))),
    )
    try:
        return await work
    except asyncio.CancelledError:
        if not gone:
            raise
        handler.uncancel()
        raise ClientDisconnected() from None
    finally:
        timer.cancel()
        for task in watcher:
            task.cancel()
