"""REST and gRPC on one port (--one-port): a connection that opens with HTTP/2's preface is
relayed to the front's own gRPC server.

Knative routes one port per service, and gRPC needs that port to speak HTTP/2 without TLS (h2c).
grpcio cannot be handed an accepted socket, and uvicorn speaks only HTTP/1.1, so the HTTP
transport (http_transport.py) looks at the first bytes of each new connection: a client speaking
gRPC with prior knowledge sends the 24-byte preface first (RFC 9113 section 3.4), which no
HTTP/1.1 request begins with. Such a connection is joined byte for byte to a private socket of
this front's gRPC server (an abstract Unix socket: no file, no TCP port), and nothing of it ever
reaches uvicorn's parser or the native path. Bytes go as they come both ways, with each side's
back-pressure pausing the other's reading. What this costs against gRPC's own port is measured by
bench/bench_one_port.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
log = logging.getLogger(__name__)


def sniff(data: bytes) -> bool | None:
    """True when `data` begins with the preface, False when it cannot, None while it is a
    prefix of it (the client's first write may come in pieces)."""
    if not PREFACE.startswith(data[: len(PREFACE)]):
        return False
    return True if len(data) >= len(PREFACE) else None


class PrivateSocket:
    """The front's gRPC server's private address: random, so no other server (or front) on the
    host shares it, and abstract, so nothing is left on disk by a front that is killed."""

    def __init__(self):
        self.name = f"etrt-grpc-{os.getpid()}-{secrets.token_hex(8)}"

    @property
    def grpc_address(self) -> str:
        return f"unix-abstract:{self.name}"

    def connect(self) -> socket.socket:
        """Connected at once (a local socket with room in its backlog) or OSError."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect("\0" + self.name)
        except OSError:
            sock.close()
            raise
        return sock


class _Upstream(asyncio.Protocol):
    """The relay's connection to the gRPC server."""

    def __init__(self, relay: Relay):
        self.relay = relay

    def data_received(self, data: bytes) -> None:
        self.relay.client.write(data)

    def connection_lost(self, exc) -> None:
        self.relay.client.close()

    def pause_writing(self) -> None:
        self.relay.client.pause_reading()

    def resume_writing(self) -> None:
        self.relay.client.resume_reading()


class Relay:
    """One client connection joined to the gRPC server. The client side's events come from the
    HTTP protocol that found the preface (to_server, client_lost, client_*_writing)."""

    def __init__(self, client: asyncio.Transport, first: bytes, private: PrivateSocket):
        self.client = client
        self._server: asyncio.Transport | None = None
        self._waiting = [first]  # what the client sent before the server side was open
        self._closed = False
        try:
            sock = private.connect()
        except OSError as exc:  # the gRPC server is gone (the front is stopping)
            log.warning("cannot relay an HTTP/2 connection to gRPC: %s", exc)
            client.close()
            return
        asyncio.get_running_loop().create_task(self._open(sock))

    async def _open(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            server, _ = await loop.create_unix_connection(lambda: _Upstream(self), sock=sock)
        except OSError:
            sock.close()
            self.client.close()
            return
        if self._closed:
            server.close()
            return
        self._server = server
        waiting, self._waiting = self._waiting, []
        server.writelines(waiting)

    def to_server(self, data: bytes) -> None:
        if self._server is None:
            self._waiting.append(data)
        else:
            self._server.write(data)

    def client_lost(self) -> None:
        self._closed = True
        if self._server is not None:
            self._server.close()

    def client_paused_writing(self) -> None:
        if self._server is not None:
            self._server.pause_reading()

    def client_resumed_writing(self) -> None:
        if self._server is not None:
            self._server.resume_reading()
