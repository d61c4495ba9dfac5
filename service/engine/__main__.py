"""The engine process (`python -m service.engine`), started by the supervisor.

SIGTERM stops it after the requests in flight (the supervisor sends it once the fronts are gone);
SIGINT is ignored, so a Ctrl-C that reaches the whole process group lets the fronts drain first.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal

import uvloop

from service.config import decode_settings
from service.embedded import Engine
from service.engine.server import EngineServer
from service.ingest import child_guard
from service.shared.gc_tuning import tune_for_serving


async def _serve(settings, ready_fd: int | None) -> None:
    # The embeddable engine (service/embedded/), served to the fronts over their links.
    engine = Engine(settings, keep_staging=os.environ.get("ETRT_ENGINE_RESTART") == "1")
    server = EngineServer(
        engine.dataplane, os.environ["ETRT_ENGINE_SOCKET"], os.environ["ETRT_ENGINE_SECRET"]
    )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    if hasattr(asyncio, "eager_task_factory"):  # Python 3.12+
        # A request that can run at once (a small program, a free instance) then completes
        # inside the message that brought it, without a trip through the event loop.
        loop.set_task_factory(asyncio.eager_task_factory)
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    server.open()
    await engine.start()
    server.start_serving()
    tune_for_serving()
    if ready_fd is not None:
        # Tells the supervisor the store opened (a failure before this is a fatal start error).
        os.write(ready_fd, b"R")
        os.close(ready_fd)
    await stopping.wait()
    server.close()
    await engine.close()


def main() -> None:
    child_guard.die_with_parent(int(os.environ["ETRT_SUPERVISOR_PID"]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    settings = decode_settings(os.environ["ETRT_SETTINGS"])
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s [engine] %(name)s: %(message)s",
    )
    ready_fd = os.environ.get("ETRT_ENGINE_READY_FD")
    uvloop.run(_serve(settings, int(ready_fd) if ready_fd else None))
    # The stopped service's objects refer to each other, and what tune_for_serving froze is out
    # of the collector's sight: collected now, the native host's programs and methods are freed
    # before the interpreter ends instead of being reported leaked by the extension.
    gc.unfreeze()
    gc.collect()


if __name__ == "__main__":
    main()
