"""The fronts' event loop: uvloop, except that a listening socket shared with other processes is
accepted from one connection per wakeup.

Every front inherits the one HTTP listening socket the supervisor bound (service/front/__main__.py).
A uvloop server accepts until nothing is pending, so when a client opens its connections at once
(wrk, a connection pool), the first front to wake takes most of them, and every connection of one
front waits on that front's one core while others idle. Accepting one connection and going back to
the loop lets each pending connection go to whichever front wakes for it next; a busy front comes
back to its listener later than an idle one, so new connections lean towards idle fronts. The socket
stays shared, so connections waiting for a front that dies are still taken by the others.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket

import uvloop

log = logging.getLogger(__name__)

# Out of descriptors or memory: the connection stays queued for another front (or a later try).
_TRANSIENT = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}


class OneAtATimeServer:
    """What uvicorn needs of an asyncio.Server (close, wait_closed, sockets) over a shared
    listening socket, accepting one connection per readiness of the socket."""

    def __init__(self, loop: asyncio.AbstractEventLoop, factory, sock: socket.socket):
        self._loop = loop
        self._factory = factory
        self._sock = sock
        self._serving = True
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._accept)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self._sock,)

    def _accept(self) -> None:
        try:
            conn, _ = self._sock.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return  # another front took it, or the client gave up while it was queued
        except OSError as exc:
            if exc.errno not in _TRANSIENT:
                raise
            log.warning("cannot accept a connection now: %s", exc)
            return
        conn.setblocking(False)
        self._loop.create_task(self._connect(conn))

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, conn)
        except OSError:  # reset before it could be set up
            conn.close()

    def close(self) -> None:
        if self._serving:
            self._serving = False
            self._loop.remove_reader(self._sock.fileno())

    async def wait_closed(self) -> None:
        return None


class FrontLoop(uvloop.Loop):
    async def create_server(self, protocol_factory, host=None, port=None, *, sock=None, **kw):
        if sock is not None and kw.get("ssl") is None:
            return OneAtATimeServer(self, protocol_factory, sock)
        return await super().create_server(protocol_factory, host, port, sock=sock, **kw)


def new_loop() -> asyncio.AbstractEventLoop:
    """uvicorn's loop factory: Config(loop="service.protocols.fair_accept:new_loop")."""
    return FrontLoop()
