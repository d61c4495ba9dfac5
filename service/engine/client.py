"""The engine as a front process sees it: the dataplane's interface, over a socket and an arena.

Protocols call the same coroutines on this as on an in-process ModelService, so no protocol knows
which process runs the models. Inference is the hot path and has its own messages
(service/engine/requests.py); everything else is a call by name whose arguments and answer are
pickled.

Losing the engine (it died; the supervisor restarts it) fails every request in flight with a
503 and abandons the arena, whose slots the old engine might still be writing: the next
connection gets a fresh one.

Every 503 says when to come back (Retry-After) from what this front measured: an engine that is
down, from how long its last start took; a full arena, from how long requests have recently held
their slots (requests.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import pickle
import time
from collections.abc import Awaitable, Callable

from service.config import Settings
from service.dataplane.scheduling.gate import Gate
from service.dataplane.types import ModelTable
from service.engine import handshake
from service.engine.link import Link, Outage
from service.engine.requests import EngineRequests
from service.errors import Busy, ServiceError
from service.ingest.staging import StagedUpload, Staging, stage_files
from service.ipc import frames
from service.ipc.arena import Arena
from service.store.storage import StagingArea

log = logging.getLogger(__name__)
_RECONNECT_S = 0.2
_REPORT_S = 0.5  # how often a changed arena usage is reported to the engine


class EngineDown(Busy):
    """The engine process is not connected (it is starting or being restarted)."""


class EngineClient(EngineRequests):
    """ModelService's interface for the protocols, served by the engine process."""

    def __init__(self, settings: Settings, socket_name: str, secret: str, front_id: int):
        self.settings = settings
        self._socket_name = socket_name
        self._secret = secret
        self._front_id = front_id
        self._staging = StagingArea(settings.artifacts)
        self._link: Link | None = None
        self._table = ModelTable(-1, {})
        self._refreshing: asyncio.Task | None = None
        self._ids = itertools.count(1)
        self._connector: asyncio.Task | None = None
        self._closing = False
        self._connected = asyncio.Event()
        self._holding_s = 0.0  # how long requests recently held arena slots (smoothed)
        self._outage = Outage()
        self.gate = Gate()  # refuses for full queues without crossing
        # Requests the protocols' native path sent (service/protocols/front_lane.py), reported
        # with the arena's usage.
        self.native_requests = 0

    # -- connection ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Returns once joined to the engine: a front takes no connection before (the app's
        startup waits for this, and the HTTP socket is served only after it)."""
        self._connector = asyncio.get_running_loop().create_task(self._keep_connected())
        await self._connected.wait()

    async def stop(self) -> None:
        self._closing = True
        if self._connector is not None:
            self._connector.cancel()
            await asyncio.gather(self._connector, return_exceptions=True)
        if self._link is not None and self._link.protocol.transport is not None:
            self._link.protocol.transport.close()

    async def _keep_connected(self) -> None:
        """Connects (again, after the engine restarted) and reports the arena's usage."""
        loop = asyncio.get_running_loop()
        reported = None
        while not self._closing:
            link = self._link
            if link is None:
                reported = None
                try:
                    await self._connect(loop)
                    self._connected.set()
                except (OSError, handshake.HandshakeError) as exc:
                    log.debug("engine not reachable yet: %s", exc)
            else:
                usage = (link.arena.in_use, link.arena.size, self.native_requests)
                if usage != reported:
                    self._note("arena_usage", self._front_id, *usage)
                    reported = usage
            await asyncio.sleep(_RECONNECT_S if link is None else _REPORT_S)

    async def _connect(self, loop) -> None:
        arena = Arena(self.settings.arena_bytes)
        sock, control, pinned = await loop.run_in_executor(
            None, handshake.connect, self._socket_name, self._secret, self._front_id, arena.fd
        )
        arena.pinned = pinned
        link = Link(self, arena, control)
        await loop.connect_accepted_socket(lambda: link.protocol, sock)
        self._table = ModelTable(-1, {})  # another engine's generations mean nothing here
        self._link = link
        self._outage.ended()
        log.info("front %d connected to the engine", self._front_id)

    def _link_lost(self, link: Link) -> None:
        if self._link is link:
            self._link = None
            self._outage.began()
            self._connected.clear()
            if not self._closing:
                log.warning("front %d lost the engine; reconnecting", self._front_id)

    @property
    def ready(self) -> bool:
        link = self._link
        return link is not None and link.generation()[1]

    def down(self) -> EngineDown:
        return EngineDown(
            "the inference engine is restarting; retry shortly",
            retry_after_s=self._outage.retry_after_s(),
        )

    def _require(self) -> Link:
        """The link to an engine that has its stored models open again, else EngineDown."""
        link = self._link
        if link is None or not link.alive or not link.serving():
            raise self.down()
        return link

    # -- calls by name ---------------------------------------------------------------------------

    async def _call(self, name: str, *args):
        link = self._require()
        call_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        link.calls[call_id] = future
        link.protocol.send((frames.CALL, call_id, name, pickle.dumps(args, protocol=5)))
        ok, payload = await future
        value = pickle.loads(payload)
        if not ok:
            raise value
        return value

    def _note(self, name: str, *args) -> None:
        link = self._link
        if link is not None:
            link.protocol.send((frames.NOTE, 0, name, pickle.dumps(args, protocol=5)))

    def __getattr__(self, name: str) -> Callable[..., Awaitable]:
        """Every other public coroutine of ModelService, called in the engine."""
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args: self._call(name, *args)

    # -- uploads: received here, checked and stored by the engine ------------------------------

    def begin_staging(self) -> Staging:
        return Staging(self._staging, self.settings)

    async def deploy(self, receive: Callable[[], Awaitable[StagedUpload]]) -> dict:
        begun = time.perf_counter()
        try:
            upload = await receive()
        except ServiceError as exc:
            self._note("upload_refused", None, exc, time.perf_counter() - begun)
            raise
        try:
            return await self._call("deploy_staged", upload, time.perf_counter() - begun)
        except EngineDown:
            self._staging.discard(upload.directory)
            raise

    async def load_model(self, name: str, files=None, config=None) -> dict:
        if files is None:
            return await self._call("load_model", name, None, config)
        return await self.deploy(
            lambda: asyncio.to_thread(stage_files, self.begin_staging(), name, files, config)
        )
