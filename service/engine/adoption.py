"""Fronts joining the engine: its listening socket, and the thread that runs each handshake
(service/shared/handshake.py). Handshakes block, and pinning an arena for CUDA takes a while, so
they run there, not on the event loop; a front that joined is handed to the loop with its arena
mapped and pinned (`joined(socket, front id, region)`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from collections.abc import Callable

from service.engine import pinning
from service.shared import handshake
from service.shared.arena import Region

log = logging.getLogger(__name__)


class Adoption:
    def __init__(
        self,
        socket_name: str,
        secret: str,
        control_fd: int,
        joined: Callable[[socket.socket, int, Region], None],
    ):
        self._socket_name = socket_name
        self._secret = secret
        self._control_fd = control_fd
        self._joined = joined
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def open(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._listener = handshake.listen(self._socket_name)
        self._accepting = threading.Thread(
            target=self._accept_loop, name="engine-accept", daemon=True
        )
        self._accepting.start()

    def _accept_loop(self) -> None:
        while True:
            try:
                sock, front_id, arena_fd = handshake.accept(self._listener, self._secret)
            except handshake.ContractMismatch as exc:
                log.error("%s", exc)
                continue
            except handshake.HandshakeError as exc:
                log.warning("%s", exc)
                continue
            except OSError:
                if self._listener.fileno() < 0:
                    return
                continue
            try:
                region = Region(arena_fd, os.fstat(arena_fd).st_size)
                pinned = pinning.pin(region)
                handshake.answer(sock, self._control_fd, pinned)
            except OSError as exc:
                log.warning("front %d could not join: %s", front_id, exc)
                sock.close()
                continue
            finally:
                os.close(arena_fd)
            self._loop.call_soon_threadsafe(self._joined, sock, front_id, region)

    def close(self) -> None:
        if self._listener is None:
            return
        # Closing alone does not wake a thread blocked in accept(); shutting it down does.
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        self._accepting.join(timeout=5)
