"""The engine process (`python -m service.engine`), started by the supervisor.

SIGTERM stops it after the requests in flight (the supervisor sends it once the fronts are gone);
SIGINT is ignored, so a Ctrl-C that reaches the whole process group lets the fronts drain first.
A GPU fault (a poisoned CUDA context, service/dataplane/gpu_faults.py) ends it with
GPU_FAULT_EXIT after a short drain, for the supervisor to start a clean process.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import threading

import uvloop

from service.config import decode_settings
from service.dataplane.service import ModelService
from service.engine.server import EngineServer
from service.ingest import child_guard
from service.shared.engine_events import GPU_FAULT_EXIT
from service.shared.gc_tuning import tune_for_serving

# After a GPU fault: how long the requests in flight get, then how long their answers get to
# reach the fronts, before the engine exits.
_DRAIN_S = 1.0
_FLUSH_S = 0.1


async def _serve(settings, ready_fd: int | None) -> None:
    service = ModelService(settings, keep_staging=os.environ.get("ETRT_ENGINE_RESTART") == "1")
    server = EngineServer(
        service, os.environ["ETRT_ENGINE_SOCKET"], os.environ["ETRT_ENGINE_SECRET"]
    )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    if hasattr(asyncio, "eager_task_factory"):  # Python 3.12+
        # A request that can run at once (a small program, a free instance) then completes
        # inside the message that brought it, without a trip through the event loop.
        loop.set_task_factory(asyncio.eager_task_factory)
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    service.gpu_faults.on_fault(lambda _: _exit_soon(stopping))
    server.open()
    await service.start()
    server.start_serving()
    tune_for_serving()
    if ready_fd is not None:
        # Tells the supervisor the store opened (a failure before this is a fatal start error).
        os.write(ready_fd, b"R")
        os.close(ready_fd)
    await stopping.wait()
    if service.gpu_faults.fault is not None:
        await _drain(server)
        os._exit(GPU_FAULT_EXIT)
    server.close()
    await service.stop()


def _exit_soon(stopping: asyncio.Event) -> None:
    """A GPU fault poisoned this process's context: it drains and exits for the supervisor to
    start a clean one. Exited by the watchdog if the drain cannot finish (a call stuck on the
    device must not leave the server unready for good)."""
    stopping.set()
    watchdog = threading.Timer(_DRAIN_S + 2.0, os._exit, (GPU_FAULT_EXIT,))
    watchdog.daemon = True
    watchdog.start()


async def _drain(server: EngineServer) -> None:
    """The requests in flight get their answers (each a 503 naming the fault, as the context
    fails them) for at most _DRAIN_S; the fronts answer 503 for any left when the engine is
    gone. Nothing is closed or freed: the process ends, and its poisoned context with it."""
    tasks = [task for front in server.fronts.values() for task in front.tasks.values()]
    if tasks:
        await asyncio.wait(tasks, timeout=_DRAIN_S)
    await asyncio.sleep(_FLUSH_S)  # the answers gathered this turn are written by the links


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
