"""The engine as a front process sees it: the dataplane's interface, over a socket and an arena.

Protocols call the same coroutines on this as on an in-process ModelService, so no protocol knows
which process runs the models. Inference is the hot path and has its own messages: the front
checks a request against its copy of the model table (refusing a bad one before it crosses),
places the input tensors in its arena unless the protocol already received them there, reserves
room for the outputs next to them, and sends the engine a descriptor of offsets. Everything else
is a call by name whose arguments and answer are pickled.

The model table is trusted only while its generation equals the engine's, which the engine
publishes in a shared page and bumps before it answers any call that changed a model; so a
request that arrives after an upload was answered, through any front, never sees the model
table from before it.

Losing the engine (it died; the supervisor restarts it) fails every request in flight with a
503 and abandons the arena, whose slots the old engine might still be writing: the next
connection gets a fresh one.

Every 503 here says when to come back (Retry-After) from what this front measured: an engine
that is down, from how long its last start took; a full arena, from how long requests have
recently held their slots (a slot frees when a request in flight is answered).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import pickle
import time
from collections.abc import Awaitable, Callable

import numpy as np

from service import oip
from service.config import Settings
from service.dataplane.scheduling.gate import Gate, Refusal
from service.dataplane.signature import bind_inputs, select_outputs
from service.dataplane.types import InferRequest, InferResponse, ModelTable, Tensor
from service.dtypes import BY_DATATYPE
from service.engine import handshake
from service.engine.link import Link, Outage, Pending, output_bytes
from service.errors import Busy, QueueFull, ServiceError, TooLarge
from service.ingest.staging import StagedUpload, Staging, stage_files
from service.ipc import frames
from service.ipc.arena import ALIGNMENT, Arena, ArenaFull, Lease, align_up
from service.shm.refs import placeholder, to_wire
from service.store.storage import StagingArea

log = logging.getLogger(__name__)
_RECONNECT_S = 0.2
_REPORT_S = 0.5  # how often a changed arena usage is reported to the engine
_SMOOTHING = 0.2  # weight of the newest request in the average time a request holds its slots


class EngineDown(Busy):
    """The engine process is not connected (it is starting or being restarted)."""


class EngineClient:
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
                usage = (link.arena.in_use, link.arena.size)
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

    # -- inference -------------------------------------------------------------------------------

    def body_buffer(self, nbytes: int, align_at: int) -> tuple[memoryview, Lease]:
        """Memory to receive a request body into, its byte `align_at` on a 256-byte boundary: a
        slot of the arena, so that tensors in it need no copy on their way to the engine."""
        link = self._require()
        start = -align_at % ALIGNMENT  # slots start on the boundary
        lease = self._allocate(link.arena, start + nbytes)
        return lease.view(start, nbytes), lease

    def _allocate(self, arena: Arena, nbytes: int) -> Lease:
        if align_up(nbytes) > arena.size:
            raise TooLarge(
                f"the request's tensors need {nbytes} bytes of shared memory, more than this "
                f"server's arena of {arena.size} bytes (--arena-bytes)"
            )
        try:
            return arena.allocate(nbytes)
        except ArenaFull:
            raise Busy(
                f"the shared memory for requests in flight is full ({arena.in_use} of "
                f"{arena.size} bytes in use); retry shortly",
                retry_after_s=max(1.0, self._holding_s),
            ) from None

    async def _current_table(self, link: Link) -> ModelTable:
        generation = link.generation()[0]
        while self._table.generation != generation:
            if self._refreshing is None or self._refreshing.done():
                self._refreshing = asyncio.get_running_loop().create_task(self._call("table"))
            table = await asyncio.shield(self._refreshing)
            if table.generation >= self._table.generation:
                self._table = table
            generation = link.generation()[0]
            if table.generation >= generation:
                break
        return self._table

    def serves(self, model: str, version: str | None = None) -> bool:
        """As ModelService.serves, from the cached table: True only for a model it holds
        ready (a stale table costs a call to model_ready, never a wrong answer)."""
        return self._table.entry(model, version) is not None

    async def model_ready(self, model: str, version: str | None = None) -> bool:
        """As ModelService.model_ready. A table older than the engine's is brought up to date
        first (one call shared by every request waiting on it): the requests that reach a front
        before its first table, or just after a model changed, would otherwise each cost the
        engine a call of their own, and under load those calls starve its inference."""
        link = self._require()
        table = self._table
        if table.generation != link.generation()[0]:
            table = await self._current_table(link)
        if table.entry(model, version) is not None:
            return True
        return await self._call("model_ready", model, version)  # False, or NotFound saying why

    def refuses(self, model: str, version: str | None, protocol: str) -> Refusal | None:
        """As ModelService.refuses, from this front's gate; the refusal is counted as the
        default method's."""
        entry = self._table.entry(model, version)
        if entry is None:
            return None
        refusal = self.gate.refuses(model, entry.version, entry.signatures, protocol)
        if refusal is not None:
            self._note("record_refused", model, oip.DEFAULT_METHOD, "busy", 0.0, version)
        return refusal

    async def infer(self, request: InferRequest) -> InferResponse:
        link = self._require()
        begun = time.perf_counter()
        table = self._table
        if table.generation != link.generation()[0]:
            table = await self._current_table(link)
        entry = table.entry(request.model, request.version)
        signature = None if entry is None else entry.signatures.get(request.method)
        inputs = [(t.name, t.datatype, t.array) for t in request.inputs]
        capacity, checked_at = 0, None
        if signature is not None:
            model, method, version = request.model, request.method, request.version
            refused = self.gate.admit(model, entry.version, method, request.protocol)
            if refused is not None:  # the engine said this queue is full: no crossing
                elapsed_s = time.perf_counter() - begun
                self._note("record_refused", model, method, "busy", elapsed_s, version)
                raise refused.error()
            try:
                arrays = bind_inputs(request.inputs, signature)
                select_outputs(signature, request.outputs)
            except ServiceError:
                self._note(
                    "record_refused",
                    request.model,
                    request.method,
                    "client_error",
                    time.perf_counter() - begun,
                    request.version,
                )
                raise
            inputs = [
                (spec.name, spec.datatype, array) for spec, array in zip(signature.inputs, arrays)
            ]
            rows = None
            if entry.max_batch and arrays and arrays[0].ndim:
                rows = arrays[0].shape[0]
            # Upper bounds can be far above what a request produces: an output that outgrows
            # its room comes back inline instead, so the room never crowds out other requests.
            capacity = min(output_bytes(entry, request.method, rows), link.arena.size // 4)
            checked_at = table.generation
        return await self._send(link, request, inputs, capacity, checked_at)

    def _engines_error(self, error: Exception) -> Exception:
        """The engine's answer to a request it refused, once a full queue's has closed the gate
        (returned, not raised here: see gate.Refusal)."""
        if type(error) is QueueFull:
            self.gate.refused(error)
        return error

    async def _send(
        self, link: Link, request: InferRequest, inputs, capacity: int, checked_at: int | None
    ) -> InferResponse:
        region = link.arena.region
        placed, copies, size = [], [], 0
        held = request.memory
        shared = request.shared_memory
        for name, datatype, array in inputs:
            if shared and name in shared.inputs:  # its bytes stay in the client's region
                ref = shared.inputs[name]
                placed.append(
                    [name, datatype, tuple(array.shape), (ref.region, ref.byte_size, ref.offset)]
                )
                continue
            # Tensors the protocol received into its slot of the arena stay where they are.
            offset = region.offset_of(array) if held is not None else None
            if (
                offset is None
                or offset % 256
                or not array.flags.c_contiguous
                or not held.offset <= offset <= held.offset + held.size - array.nbytes
            ):
                copies.append((len(placed), array, size))
                size += align_up(array.nbytes)
            placed.append([name, datatype, tuple(array.shape), offset])
        lease = self._allocate(link.arena, size + capacity)
        leases = [lease]
        if held is not None:
            leases.append(held.retain())
        for index, array, at in copies:
            target = region.array(lease.offset + at, array.dtype, array.shape)
            target[...] = array
            placed[index][3] = lease.offset + at
        request_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        pending = Pending(future, leases)
        link.pending[request_id] = pending
        link.protocol.send(
            (
                frames.INFER,
                request_id,
                request.model,
                request.version,
                request.method,
                [tuple(p) for p in placed],
                request.outputs,
                lease.offset + size,
                lease.size - size,
                request.timeout_s,
                request.id,
                pickle.dumps(request.parameters) if request.parameters else None,
                checked_at,
                to_wire(shared) if shared else None,
            )
        )
        sent = time.perf_counter()
        try:
            ok, payload, _ = await future
        except asyncio.CancelledError:
            # The engine may be writing the outputs: the slots stay held until it answers.
            link.protocol.send((frames.CANCEL, request_id))
            raise
        except BaseException:
            pending.settle()
            raise
        self._holding_s += _SMOOTHING * (time.perf_counter() - sent - self._holding_s)
        if not ok:
            pending.settle()
            raise self._engines_error(pickle.loads(payload))
        version, outputs = payload
        tensors = []
        for name, datatype, shape, offset, inline in outputs:
            carrier = BY_DATATYPE[datatype].carrier
            if offset == -1:  # written into the client's shared memory region
                array = placeholder(datatype, shape)
            elif inline is None:
                array = region.array(offset, carrier, tuple(shape))
            else:  # did not fit its upper bound (a program that outgrew its own plan)
                array = np.frombuffer(inline, carrier).reshape(shape)
            tensors.append(Tensor(name, datatype, array))
        return InferResponse(
            request.model, version, request.method, request.id, tensors, on_release=pending.settle
        )
