"""The fronts' loop takes one connection per wakeup from a listening socket shared by fronts."""

import asyncio
import socket

from service.front.protocols.fair_accept import FrontLoop, OneAtATimeServer


class Counting(asyncio.Protocol):
    def __init__(self, made: list):
        self.made = made

    def connection_made(self, transport):
        self.made.append(transport)


class CountingListener:
    """A listening socket that counts its accepts."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.accepts = 0

    def accept(self):
        self.accepts += 1
        return self.sock.accept()

    def __getattr__(self, name):
        return getattr(self.sock, name)


def _run(main):
    loop = FrontLoop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_the_fronts_loop_serves_a_passed_socket_one_connection_at_a_time():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)

    async def main():
        server = await asyncio.get_running_loop().create_server(asyncio.Protocol, sock=sock)
        server.close()
        return server

    try:
        server = _run(main)
    finally:
        sock.close()
    assert isinstance(server, OneAtATimeServer) and server.sockets == (sock,)


def test_each_wakeup_accepts_one_connection_and_close_stops_accepting():
    listener = CountingListener()
    address = listener.getsockname()
    made: list = []
    clients = [socket.create_connection(address) for _ in range(3)]  # all queued at once

    async def main():
        server = OneAtATimeServer(asyncio.get_running_loop(), lambda: Counting(made), listener)
        per_turn = []
        for _ in range(6):
            before = listener.accepts
            await asyncio.sleep(0)
            per_turn.append(listener.accepts - before)
        for _ in range(50):
            if len(made) == 3:
                break
            await asyncio.sleep(0.01)
        accepted = len(made)
        server.close()
        clients.append(socket.create_connection(address))
        await asyncio.sleep(0.05)
        await server.wait_closed()
        return per_turn, accepted

    try:
        per_turn, accepted = _run(main)
    finally:
        for client in clients:
            client.close()
        listener.close()
    assert max(per_turn) == 1  # never two in one turn: another front may take the next one
    assert accepted == 3
    assert len(made) == 3  # once closed, new connections are left to the other fronts


def test_fronts_that_have_not_listened_keep_the_server_unready_and_take_no_connection(
    monkeypatch,
):
    from service.front.protocols import fair_accept

    fd = fair_accept.new_loads_fd(3)
    started = fair_accept.StartedFronts(fd)
    assert started.waiting() == 3 and not started()
    monkeypatch.setenv(fair_accept.LOADS_FD, str(fd))
    first = fair_accept.FrontLoads(fd, 0)  # front 0 listens
    first.opened()
    # Front 2 has not listened: the least loaded front that listens is 1 (none), then front 0.
    second = fair_accept.FrontLoads(fd, 1)
    assert first.more_than_least() and not second.more_than_least()
    second.opened()
    second.opened()
    assert not first.more_than_least() and second.more_than_least()
    assert started.waiting() == 1 and not started()
    fair_accept.FrontLoads(fd, 2)
    assert started() and started.waiting() == 0
    second.counts[2] = fair_accept.NOT_LISTENING  # a front restarting later: still ready
    assert started()


def test_readiness_stops_waiting_for_a_front_that_never_listens(monkeypatch):
    from service.front.protocols import fair_accept

    started = fair_accept.StartedFronts(fair_accept.new_loads_fd(2))
    assert not started()
    monkeypatch.setattr(fair_accept.time, "monotonic", lambda: float("inf"))
    assert started()  # and says which (logged)


def test_a_connection_counts_from_its_accept_and_uncounts_when_lost():
    """The other fronts' next accepts must see a connection as soon as it is taken, not a turn
    later when it is set up."""
    from service.front.protocols import fair_accept

    loads = fair_accept.FrontLoads(fair_accept.new_loads_fd(1), 0)
    listener = CountingListener()
    made: list = []
    client = socket.create_connection(listener.getsockname())

    async def main():
        server = OneAtATimeServer(
            asyncio.get_running_loop(), lambda: Counting(made), listener, loads
        )
        while listener.accepts == 0:
            await asyncio.sleep(0)
        at_accept = int(loads.counts[0]), len(made)  # taken, not yet set up
        for _ in range(50):
            if made:
                break
            await asyncio.sleep(0.01)
        set_up = int(loads.counts[0])
        made[0].close()
        await asyncio.sleep(0.05)
        server.close()
        return at_accept, set_up, int(loads.counts[0])

    try:
        at_accept, set_up, after = _run(main)
    finally:
        client.close()
        listener.close()
    assert at_accept == (1, 0) and set_up == 1 and after == 0
