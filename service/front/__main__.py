"""A protocol front process: every protocol of the server over the engine process's dataplane.

Started by the supervisor (service/supervisor.py), never by hand. It serves HTTP on the listening
socket the supervisor bound and shares with every front (the kernel hands each new connection to
one of them), and gRPC on the gRPC port, which the fronts share with SO_REUSEPORT (and, with
--one-port, on the HTTP port too). SIGTERM drains it (service/front/draining.py). It holds no
model state beyond the engine client's copy of the model table.
"""

from __future__ import annotations

import gc
import logging
import os
import socket
import sys

import uvicorn

from service.config import decode_settings
from service.front.app import create_app
from service.front.draining import DrainingServer
from service.front.engine_client import EngineClient
from service.front.protocols import fair_accept
from service.front.protocols.drain import Drain
from service.front.protocols.http_transport import GatheringHttpToolsProtocol
from service.front.protocols.read_timeouts import ReadTimeouts
from service.ingest import child_guard
from service.shared.gc_tuning import tune_for_serving
from service.shared.heap_tuning import keep_freed_pages


def main() -> None:
    child_guard.die_with_parent(int(os.environ["ETRT_SUPERVISOR_PID"]))
    settings = decode_settings(os.environ["ETRT_SETTINGS"])
    # The fronts run below the engine's CPU priority (--front-nice, inherited by their threads
    # and offload workers). Under overload the fronts are never idle: clients that send a
    # refused request again at once keep them refusing for as long as they get a core, and at
    # equal priority that work takes the cores the engine's executes need (on 2 cores, a flood's
    # execute took twice its time alone). What serves admitted requests goes first; where
    # nothing executes, a front waits for nobody. Lowering one's own priority needs no privilege.
    os.nice(settings.front_nice)
    front_id = int(os.environ["ETRT_FRONT_ID"])
    logging.basicConfig(
        level=settings.log_level.upper(),
        format=f"%(asctime)s %(levelname)s [front {front_id}] %(name)s: %(message)s",
    )
    client = EngineClient(
        settings,
        os.environ["ETRT_ENGINE_SOCKET"],
        os.environ["ETRT_ENGINE_SECRET"],
        front_id,
        fair_accept.StartedFronts.of_this_front(),
    )
    # Worker processes decoding large JSON bodies: the host's cores, shared among the fronts.
    offload_workers = max(1, min(4, (os.cpu_count() or 1) // settings.workers))
    drain = Drain(settings.shutdown_grace_s)
    app = create_app(settings, client, offload_workers, drain)
    listener = socket.socket(fileno=int(os.environ["ETRT_HTTP_FD"]))
    tune_for_serving()
    keep_freed_pages()
    GatheringHttpToolsProtocol.timeouts = ReadTimeouts(
        settings.header_timeout_s, settings.body_timeout_s
    )
    server = DrainingServer(
        uvicorn.Config(
            app,
            # uvloop, accepting one connection at a time from the shared listening socket.
            loop="service.front.protocols.fair_accept:new_loop",
            http=GatheringHttpToolsProtocol,
            # Nothing here reads the client's address or scheme, so X-Forwarded-* need not be
            # parsed on every request.
            proxy_headers=False,
            log_level=settings.log_level,
            access_log=settings.access_log,
            limit_concurrency=settings.max_connections,
        ),
        drain,
        client,
    )
    server.run(sockets=[listener])
    if not server.started:  # its startup failed (an engine of another contract, say): logged
        sys.exit(3)


if __name__ == "__main__":
    main()
    # A drained front ends normally (uvicorn's own exit re-raised the signal and died of it), so
    # the interpreter's end sees what is left: the native path's objects refer to each other, and
    # what tune_for_serving froze is out of the collector's sight. Collected now, they are freed
    # before the interpreter ends instead of being reported leaked by the extension.
    gc.unfreeze()
    gc.collect()
