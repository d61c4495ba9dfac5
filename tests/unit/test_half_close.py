"""The half-close probe (service/front/protocols/half_close.py) on real TCP sockets: after a
FIN, a client that only half-closed takes the probe and keeps its connection; one that closed
resets it, which the watch reports."""

import asyncio
import socket

import pytest

from service.front.protocols.half_close import PROBE, PeerWatch


class _Transport:
    """What PeerWatch needs of uvloop's transport (http_transport's gathering one)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def get_extra_info(self, name):
        return self.sock if name == "socket" else None

    def write_now(self, data: bytes) -> None:
        self.sock.sendall(data)


@pytest.mark.parametrize("half", [True, False], ids=["half-close", "close"])
def test_the_probe_tells_a_half_close_from_a_close(half):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    with server, client:
        client.sendall(b"GET / HTTP/1.1\r\n\r\n")
        if half:
            client.shutdown(socket.SHUT_WR)
        else:
            client.close()
        server.recv(100)
        assert server.recv(100) == b""  # the FIN, the same either way
        resets = []
        loop = asyncio.new_event_loop()
        try:
            watch = PeerWatch.start(loop, _Transport(server), True, lambda: resets.append(1))
            loop.run_until_complete(asyncio.sleep(0.2))
            watch.stop()
        finally:
            loop.close()
        assert resets == ([] if half else [1])
        if half:
            assert client.recv(100) == PROBE


def test_a_connection_that_is_not_tcp_is_not_probed():
    left, right = socket.socketpair()
    with left, right:
        loop = asyncio.new_event_loop()
        try:
            assert PeerWatch.start(loop, _Transport(left), True, lambda: None) is None
        finally:
            loop.close()
