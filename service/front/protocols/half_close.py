"""What a client's FIN means for the request it left waiting: the one rule, for both of a
front's paths (the native path's ticket and the ASGI route's request cycle alike).

A FIN after a whole request is a half-close (shutdown(SHUT_WR): the client still reads, and
HTTP/1.1 lets it) or a full close (the client left). TCP tells them apart only once the server
writes: a socket its application closed answers data with a RST, a half-closed one takes it.
So on a FIN with an answer pending, the front writes an interim `100 Continue` (RFC 9110
section 15.2: a client parses a 1xx it did not expect) and watches the connection's TCP state,
at once and then more and more rarely while the answer is pending:

- CLOSE: the peer reset it, it left. The connection is closed, which cancels its request as
  any disconnect does (the native path's ticket, service/front/protocols/disconnect.py for the
  ASGI route), so a request still queued never runs for nobody.
- still CLOSE_WAIT: half-closed. The answer is written when it is ready, then the connection
  closes (the client's FIN said it sends no more requests).

A connection that is not TCP (a Unix socket) cannot be probed so: a FIN there is taken as the
client leaving, as before. Nor is a 1xx sent to an HTTP/1.0 request (RFC 9110 forbids it).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

PROBE = b"HTTP/1.1 100 Continue\r\n\r\n"
# Seconds after the probe at which the state is looked at: a loopback RST lands within the first,
# a distant client's within a round trip; then once a second while the answer is pending.
_CHECKS_S = (0.001, 0.01, 0.1, 1.0)
_TCP_CLOSE = 7  # linux/tcp_states.h: TCP_CLOSE, what a RST leaves


def _tcp_state(sock) -> int | None:
    """The kernel's TCP state of `sock`; None where it cannot be read."""
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
    except (OSError, AttributeError):
        return None


class PeerWatch:
    """Probes a connection whose client sent a FIN while its answer was pending, and calls
    `on_reset` once if the client turns out to have closed it (stop() ends the watch)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock, on_reset: Callable[[], None]):
        self._loop = loop
        self._sock = sock
        self._on_reset = on_reset
        self._timer: asyncio.TimerHandle | None = None
        self._step = 0

    @classmethod
    def start(
        cls, loop: asyncio.AbstractEventLoop, transport, probe: bool, on_reset: Callable[[], None]
    ) -> PeerWatch | None:
        """A watch on `transport`'s connection, the probe written first if `probe` (False when
        a response has begun: nothing may come between its parts); None where the connection
        cannot be probed (not TCP), and the FIN is the client leaving."""
        sock = transport.get_extra_info("socket")
        if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        if _tcp_state(sock) is None:
            return None
        watch = cls(loop, sock, on_reset)
        if probe:
            transport.write_now(PROBE)
        watch._arm()
        return watch

    def _arm(self) -> None:
        delay = _CHECKS_S[min(self._step, len(_CHECKS_S) - 1)]
        self._step += 1
        self._timer = self._loop.call_later(delay, self._check)

    def _check(self) -> None:
        self._timer = None
        if _tcp_state(self._sock) in (_TCP_CLOSE, None):
            self._on_reset()
            return
        self._arm()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
