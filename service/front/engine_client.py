"""The engine as a front process sees it: the dataplane's interface, over a socket and an arena.

Protocols call the same methods on this as on an in-process ModelService (the interface
contract.Dataplane declares), so no protocol knows which process runs the models. Inference is
the hot path and has its own messages (service/front/engine_requests.py); every other method is one
declared call (service/shared/contract.py): a typed record, pickled, answered by the engine's one
handler for it.

Losing the engine (it died; the supervisor restarts it) fails every request in flight with a
503 and abandons the arena, whose slots the old engine might still be writing: the next
connection gets a fresh one.

Every 503 says when to come back (Retry-After) from what this front measured: an engine that is
down, from how long its last start took; a full arena, from how long requests have recently held
their slots (engine_requests.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import pickle
import time
from collections.abc import Callable
from typing import ClassVar

from service.config import Settings
from service.dataplane.scheduling.gate import Gate
from service.dataplane.types import ModelTable
from service.errors import Busy, ServiceError
from service.front.engine_link import Link, Outage
from service.front.engine_requests import EngineRequests
from service.ingest.staging import StagedUpload, Staging, stage_files
from service.shared import contract as c
from service.shared import frames, handshake, messages, metrics_snapshot
from service.shared.arena import Arena
from service.shared.engine_events import EngineEvents
from service.store.storage import StagingArea

log = logging.getLogger(__name__)
_RECONNECT_S = 0.2
_REPORT_S = 0.5  # how often a changed arena usage is reported to the engine


# A restart older than this is no longer why the server is not ready.
_RECENT_S = 60.0


class EngineDown(Busy):
    """The engine process is not connected (it is starting or being restarted)."""


class EngineClient(EngineRequests):
    """ModelService's interface for the protocols (contract.Dataplane), served by the engine
    process."""

    capabilities: ClassVar[c.Capability] = c.Capability.ENGINE_LINK | c.Capability.SHARED_MEMORY

    def __init__(
        self,
        settings: Settings,
        socket_name: str,
        secret: str,
        front_id: int,
        fronts_started: Callable[[], bool] | None = None,
    ):
        """fronts_started: whether every front of the server has listened
        (fair_accept.StartedFronts): till then the server is not ready."""
        self.settings = settings
        self._fronts_started = fronts_started or (lambda: True)
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
        self._refused: handshake.ContractMismatch | None = None  # by an engine of another build
        self._holding_s = 0.0  # how long requests recently held arena slots (smoothed)
        self._outage = Outage()
        self._events = EngineEvents.from_env()
        self.gate = Gate()  # refuses for full queues without crossing
        # Requests the protocols' native path sent (service/front/native_path.py), reported
        # with the arena's usage.
        self.native_requests = 0
        # Set when the front drains after SIGTERM (service/front/draining.py): from then on it
        # reads not ready, whatever the engine says, on every protocol that asks.
        self.draining = False
        self._metrics_max_age_s = settings.metrics_max_age_ms / 1e3
        self._scrape_noted_at = 0.0

    # -- connection ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Returns once joined to the engine: a front takes no connection before (the app's
        startup waits for this, and the HTTP socket is served only after it)."""
        self._connector = asyncio.get_running_loop().create_task(self._keep_connected())
        await self._connected.wait()
        if self._refused is not None:  # the front cannot serve: it exits, saying why
            raise self._refused

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
                except handshake.ContractMismatch as exc:
                    log.error("%s", exc)
                    self._refused = exc
                    self._connected.set()
                    return
                except (OSError, handshake.HandshakeError) as exc:
                    log.debug("engine not reachable yet: %s", exc)
            else:
                usage = c.ArenaUsage(
                    self._front_id, link.arena.in_use, link.arena.size, self.native_requests
                )
                if usage != reported:
                    self._note(usage)
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
        return (
            link is not None
            and not self.draining
            and link.generation()[1]
            and self._fronts_started()
        )

    def not_ready_reason(self) -> str:
        """Why the server is not ready: a GPU fault or an engine restart of the last minute, as
        recorded by the engine and the supervisor (service/shared/engine_events.py), else that
        it is starting (its fronts too) or stopping."""
        return self._events.why_away(_RECENT_S) or "the server is starting or stopping"

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

    # -- the declared calls (service/shared/contract.py) -----------------------------------------

    async def _call(self, call: c.EngineCall):
        link = self._require()
        call_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        link.calls[call_id] = future
        record = pickle.dumps(call, protocol=5)
        link.protocol.send(messages.Call(frames.CALL, call_id, record))
        result: messages.Result = await future
        value = pickle.loads(result.payload)
        if not result.ok:
            raise value
        return value

    def _note(self, note) -> None:
        link = self._link
        if link is not None:
            link.protocol.send(messages.Note(frames.NOTE, pickle.dumps(note, protocol=5)))

    async def signatures(self, model: str, version: str | None = None) -> dict:
        return await self._call(c.Signatures(model, version))

    async def served_versions(self, model: str) -> list[str]:
        return await self._call(c.ServedVersions(model))

    async def model_config(self, model: str, version: str | None = None) -> dict:
        return await self._call(c.ModelConfig(model, version))

    async def model_stats(self, model: str | None, version: str | None = None) -> list[dict]:
        return await self._call(c.ModelStats(model, version))

    async def list_models(self) -> list[dict]:
        return await self._call(c.ListModels())

    async def describe(self, model: str, version: str | None = None) -> dict:
        return await self._call(c.Describe(model, version))

    async def metrics_text(self) -> str:
        return self.recent_metrics() or await self._call(c.MetricsText())

    def recent_metrics(self) -> str | None:
        """The engine's last /metrics page when this front has requests in flight and the page
        is at most --metrics-max-age-ms old, else None (ask the engine): asking would wait two
        more turns of this busy loop (service/shared/metrics_snapshot.py). An idle front asks,
        so a scrape after a client's last answer counts it."""
        link = self._link
        if link is None or not link.alive:
            return None
        if not (link.arena.in_use or link.pending or link.relays or link.calls):
            return None
        snapshot = metrics_snapshot.read(link.control)
        now = time.monotonic()
        if snapshot is None or now - snapshot.rendered_at > self._metrics_max_age_s:
            return None
        if now - self._scrape_noted_at >= 1.0:
            self._scrape_noted_at = now
            self._note(c.MetricsScraped())
        return snapshot.text

    async def repository_index(self) -> list[dict]:
        return await self._call(c.RepositoryIndex())

    async def unload_model(self, model: str) -> None:
        await self._call(c.Unload(model))

    async def delete(self, model: str, version: str | None = None) -> None:
        await self._call(c.Delete(model, version))

    async def shm_register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        await self._call(c.ShmRegisterSystem(name, key, offset, byte_size))

    async def shm_register_cuda(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        await self._call(c.ShmRegisterCuda(name, raw_handle, device_id, byte_size))

    async def shm_status(self, kind: str, name: str | None = None) -> list[dict]:
        return await self._call(c.ShmStatus(kind, name))

    async def shm_unregister(self, kind: str, name: str | None = None) -> None:
        await self._call(c.ShmUnregister(kind, name))

    # -- uploads: received and staged here, checked and stored by the engine -------------------

    def begin_staging(self) -> Staging:
        return Staging(self._staging, self.settings)

    async def deploy(self, upload: StagedUpload, received_s: float = 0.0) -> dict:
        """The staged upload, which the engine consumes; discarded here if the engine is down."""
        try:
            return await self._call(c.Deploy(upload, received_s))
        except EngineDown:
            self._staging.discard(upload.directory)
            raise

    def upload_refused(self, model: str | None, error: ServiceError, elapsed_s: float) -> None:
        self._note(c.UploadRefused(model, error, elapsed_s))

    async def load_model(self, model: str, files=None, config=None) -> dict:
        if files is None:
            return await self._call(c.Reload(model, config))
        staging = self.begin_staging()
        upload = await asyncio.to_thread(stage_files, staging, model, files, config)
        return await self.deploy(upload)
