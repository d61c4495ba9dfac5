"""The control page: one shared page every front maps (handshake.answer passes its fd), holding
the model-table generation, readiness, and whether the engine serves yet. The engine writes it
before it answers whatever changed them, so no front can act on a table older than an answer a
client already has. After it in the same memfd, the last /metrics page (metrics_snapshot).
"""

from __future__ import annotations

import mmap
import os

from service.shared import handshake, metrics_snapshot


class ControlPage:
    def __init__(self):
        self.fd = os.memfd_create("etrt-control", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, handshake.MAPPED_BYTES)
        self._page = mmap.mmap(self.fd, handshake.MAPPED_BYTES)
        self.metrics = metrics_snapshot.Writer(self._page)

    def write(self, generation: int, ready: bool, serving: bool) -> None:
        handshake.CONTROL.pack_into(self._page, 0, generation, int(ready), int(serving))
