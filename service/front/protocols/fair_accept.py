"""The fronts' event loop: uvloop, except that a listening socket shared with other processes is
accepted from one connection per wakeup.

Every front inherits the one HTTP listening socket the supervisor bound (service/front/__main__.py).
A uvloop server accepts until nothing is pending, so when a client opens its connections at once
(wrk, a connection pool), the first front to wake takes most of them, and every connection of
one front waits on that front's one core while others idle. Accepting one
connection and going back to the loop lets each pending connection go to whichever front wakes
for it next; a busy front comes back to its listener later than an idle one, so new connections
lean towards idle fronts. The socket stays shared, so connections waiting for a front that dies
are still taken by the others.

A front counts only once it listens: the supervisor makes every entry NOT_LISTENING, and the
server is ready only once every front has listened (StartedFronts, read by each front's
readiness). A client that opened its pool as soon as the server answered at all kept, for as long
as its connections lived, only the fronts that had started: 5 of 8 on the 16-core host, 37 %
less throughput for good.

That spreads connections as they are opened, not as they are kept: four keep-alive clients
opening their connections one after another could all land on the front that woke first. So
the fronts also publish how many connections each holds (FrontLoads, a small shared memory the
supervisor makes), and a front holding more than the least loaded one does not accept at once:
it stops listening for DEFER_S and lets the least loaded front take the connection; if nobody
took it by then (that front is busy or gone), it takes it itself. The least loaded front never
waits, so a connection waits DEFER_S at most.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import mmap
import os
import socket
import time

import numpy as np
import uvloop

log = logging.getLogger(__name__)

# Out of descriptors or memory: the connection stays queued for another front (or a later try).
_TRANSIENT = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
# How long a front holding more connections than another leaves a new one to the others: long
# enough for an idle front to be scheduled on cores busy with clients (5 ms was not, on two).
DEFER_S = 0.02
LOADS_FD = "ETRT_FRONT_LOADS_FD"
# A front's entry until it listens.
NOT_LISTENING = -1
# Readiness waits this long at most for every front to listen: one that cannot start (it is
# restarted meanwhile, and logs why) leaves the others serving.
STARTUP_WAIT_S = 30.0


class FrontLoads:
    """Open connections per front, in shared memory every front maps (one int64 each; each
    front writes its own, reads all). Made by the supervisor (new_loads_fd), found by a front
    through LOADS_FD and ETRT_FRONT_ID."""

    def __init__(self, fd: int, front: int):
        self._map = mmap.mmap(fd, 0)
        self.counts = np.frombuffer(self._map, np.int64)
        self.front = front
        self.counts[front] = 0  # listening from now; a restarted front starts from none

    @classmethod
    def of_this_front(cls) -> FrontLoads | None:
        fd = os.environ.get(LOADS_FD)
        return None if fd is None else cls(int(fd), int(os.environ["ETRT_FRONT_ID"]))

    def opened(self) -> None:
        self.counts[self.front] += 1

    def closed(self) -> None:
        self.counts[self.front] -= 1

    def more_than_least(self) -> bool:
        """Than the least loaded front that listens: one that does not yet cannot take it."""
        counts = self.counts
        return counts[self.front] > counts[counts > NOT_LISTENING].min()


class StartedFronts:
    """Whether every front of the server has listened, once (then for good: a front restarted
    later leaves the others serving), or STARTUP_WAIT_S have passed since this one started."""

    def __init__(self, fd: int):
        self._map = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
        self.counts = np.frombuffer(self._map, np.int64)
        self._given_up_at = time.monotonic() + STARTUP_WAIT_S
        self._all = False

    @classmethod
    def of_this_front(cls) -> StartedFronts | None:
        fd = os.environ.get(LOADS_FD)
        return None if fd is None else cls(int(fd))

    def waiting(self) -> int:
        """Fronts that have not listened yet."""
        return int((self.counts == NOT_LISTENING).sum())

    def __call__(self) -> bool:
        if not self._all:
            self._all = self.waiting() == 0
            if not self._all and time.monotonic() > self._given_up_at:
                log.warning(
                    "%d front(s) not listening %g s after start: ready without them",
                    self.waiting(),
                    STARTUP_WAIT_S,
                )
                self._all = True
        return self._all


def new_loads_fd(fronts: int) -> int:
    """The shared memory of FrontLoads for `fronts` fronts, as a file descriptor to pass on:
    every front NOT_LISTENING until it listens."""
    fd = os.memfd_create("etrt-front-loads", os.MFD_CLOEXEC)
    os.write(fd, np.full(fronts, NOT_LISTENING, np.int64).tobytes())
    return fd


class OneAtATimeServer:
    """What uvicorn needs of an asyncio.Server (close, wait_closed, sockets) over a shared
    listening socket, accepting one connection per readiness of the socket."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        factory,
        sock: socket.socket,
        loads: FrontLoads | None = None,
    ):
        self._loop = loop
        self._factory = factory
        self._sock = sock
        self._serving = True
        self._loads = loads
        sock.setblocking(False)
        loop.add_reader(sock.fileno(), self._accept)

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self._sock,)

    def _accept(self) -> None:
        if self._loads is not None and self._loads.more_than_least():
            self._loop.remove_reader(self._sock.fileno())
            self._loop.call_later(DEFER_S, self._listen_again)
            return
        self._take()

    def _listen_again(self) -> None:
        """A connection still waiting now is one the less loaded fronts did not take."""
        if self._serving:
            self._take()
            self._loop.add_reader(self._sock.fileno(), self._accept)

    def _take(self) -> None:
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
        if self._loads is not None:
            # Counted from the accept, not from when the connection is set up a turn later:
            # the other fronts' next accepts must see it (four fronts on two busy cores took
            # 3 / 1 / 2 / 2 of a pool's eight connections while their counts lagged).
            self._loads.opened()
        self._loop.create_task(self._connect(conn))

    async def _connect(self, conn: socket.socket) -> None:
        handed = []  # the protocol, once made: its connection_lost uncounts from then on
        factory = self._factory if self._loads is None else lambda: self._counted(handed)
        try:
            await self._loop.connect_accepted_socket(factory, conn)
        except OSError:  # reset before it could be set up
            conn.close()
            if self._loads is not None and not handed:
                self._loads.closed()

    def _counted(self, handed: list):
        """The protocol, its connection (counted at the accept) uncounted when it is lost."""
        protocol = self._factory()
        handed.append(protocol)
        loads, lost = self._loads, protocol.connection_lost

        def connection_lost(exc) -> None:
            loads.closed()
            lost(exc)

        protocol.connection_lost = connection_lost
        return protocol

    def close(self) -> None:
        if self._serving:
            self._serving = False
            self._loop.remove_reader(self._sock.fileno())

    async def wait_closed(self) -> None:
        return None


class FrontLoop(uvloop.Loop):
    async def create_server(self, protocol_factory, host=None, port=None, *, sock=None, **kw):
        if sock is not None and kw.get("ssl") is None:
            return OneAtATimeServer(self, protocol_factory, sock, FrontLoads.of_this_front())
        return await super().create_server(protocol_factory, host, port, sock=sock, **kw)


def new_loop() -> asyncio.AbstractEventLoop:
    """uvicorn's loop factory: Config(loop="service.front.protocols.fair_accept:new_loop")."""
    return FrontLoop()
