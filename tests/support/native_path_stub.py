"""A NativePath (service/front/native_path.py) over stand-ins for what it is given at run time:
the native reader, the engine link (its lane messages collected in a list) and the front's
engine client, for unit tests of its Python glue. Real ones: tests/e2e."""

from __future__ import annotations

import struct
from types import SimpleNamespace

from service.front.native_path import NativePath

ROUTE = 3  # the one route of the table: model "m", version "1", method "forward"
LANE_MESSAGE = struct.pack("<II", 0, ROUTE)  # a route id at byte 4, as lane requests carry it


def native_path_over(client, native) -> tuple[NativePath, SimpleNamespace, list]:
    """(the path, its engine link, the lane messages sent on it); `client` stands for the
    front's EngineRequests (its gate, admits, down, native_requests), `native` for the native
    reader (etrt_front.FrontLane)."""
    sent: list = []
    link = SimpleNamespace(
        alive=True, relays={}, protocol=SimpleNamespace(send_payload=sent.append)
    )
    settings = SimpleNamespace(max_json_bytes=1 << 20, max_infer_bytes=1 << 20)
    path = NativePath(client, settings, None, {})
    path._current = lambda: native
    path._link = link
    path._routes = {ROUTE: ("m", "1", "forward")}
    return path, link, sent
