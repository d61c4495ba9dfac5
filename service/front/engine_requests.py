"""Inference as a front sends it to the engine: checked here, tensors placed in the arena.

The front checks a request against its copy of the model table (refusing a bad one before it
crosses), places the input tensors in its arena unless the protocol already received them there,
reserves room for the outputs next to them, and sends the engine a descriptor of offsets; the
answer names where the outputs are. A request the fronts' native path took is sent by it
(service/front/protocols/front_lane.py); the ASGI route's requests come through infer().

The model table is trusted only while its generation equals the engine's, which the engine
publishes in a shared page and bumps before it answers any call that changed a model; so a
request that arrives after an upload was answered, through any front, never sees the model
table from before it.
"""

from __future__ import annotations

import asyncio
import pickle
import time
from typing import NamedTuple

import numpy as np

from service import oip
from service.dataplane.scheduling.gate import Refusal
from service.dataplane.signature import bind_inputs, select_outputs
from service.dataplane.types import InferRequest, InferResponse, ModelTable, Tensor
from service.dtypes import BY_DATATYPE
from service.errors import Busy, QueueFull, ServiceError, TooLarge
from service.front.engine_link import Link, Pending, output_bytes
from service.shared import frames, lane_frames, messages
from service.shared.arena import ALIGNMENT, Arena, ArenaFull, Lease, align_up
from service.shared.contract import GetTable, ModelReady, RequestRefused
from service.shm.refs import nbytes, placeholder, to_wire

_SMOOTHING = 0.2  # weight of the newest request in the average time a request holds its slots
_DEADLINE_EARLY_S = 0.01  # how early a call may be cancelled at its deadline


def deadline_passed(timeout_s: float | None, elapsed_s: float) -> bool:
    """Whether a call cancelled `elapsed_s` after it began was cancelled at its deadline
    (`timeout_s` the time it had left then, read with no wait before it began; None: it had
    none), so that its cancel is counted as a deadline passed. gRPC's timers may fire a few
    milliseconds early."""
    return timeout_s is not None and elapsed_s >= timeout_s - _DEADLINE_EARLY_S


class _Refused(Exception):
    """A request this front refuses without crossing; `kind` is how statistics count it."""

    def __init__(self, kind: str, error: ServiceError):
        self.kind = kind
        self.error = error


class LanePlan(NamedTuple):
    """How a checked request travels as a lane request, and how its answer reads."""

    route: int
    mask: int  # bit i: output i asked for
    version: str
    outputs: list  # (name, datatype) of every output of the method


def _lane_plan(entry, request: InferRequest, signature, asked: list[int]) -> LanePlan | None:
    """A lane request carries what the lane needs and nothing else, so only a request the
    engine would run as it is: one with no parameters or timeout of its own, asking for
    outputs in the method's order (the lane answers them in that order). Tensors in shared
    memory regions travel as its references (_lane_refs)."""
    route = entry.routes.get(request.method)
    if (
        route is None
        or request.parameters
        or request.timeout_s is not None
        or any(b <= a for a, b in zip(asked, asked[1:]))
    ):
        return None
    mask = 0
    for index in asked:
        mask |= 1 << index
    outputs = [(spec.name, spec.datatype) for spec in signature.outputs]
    return LanePlan(route, mask, entry.version, outputs)


def _lane_refs(shared, placed: list, lane: LanePlan) -> list | None:
    """The request's shared memory references as a lane request carries them
    (lane_frames.request), or None when one is for the engine's Python to judge and word: an
    input whose byte size is not its tensor's, a reference to a tensor the request does not
    have or an output it does not ask for."""
    refs = []
    for index, (_, datatype, shape, where) in enumerate(placed):
        if type(where) is tuple:  # (region, byte size, offset), as _dispatch placed it
            region, byte_size, offset = where
            if byte_size != nbytes(datatype, shape):
                return None
            refs.append((index, False, region, offset, byte_size))
    if len(refs) != len(shared.inputs):
        return None
    names = [name for name, _ in lane.outputs]
    for name, ref in shared.outputs.items():
        index = names.index(name) if name in names else -1
        if index < 0 or not lane.mask >> index & 1:
            return None
        refs.append((index, True, ref.region, ref.offset, ref.byte_size))
    return refs


class EngineRequests:
    """EngineClient's inference (service/front/engine_client.py keeps the link, table and calls)."""

    _link: Link | None
    _table: ModelTable
    _refreshing: asyncio.Task | None
    _holding_s: float  # how long requests recently held arena slots (smoothed)

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
                self._refreshing = asyncio.get_running_loop().create_task(self._call(GetTable()))
            table = await asyncio.shield(self._refreshing)
            if table.generation >= self._table.generation:
                self._table = table
            generation = link.generation()[0]
            if table.generation >= generation:
                break
        return self._table

    def native_path_link(self) -> Link | None:
        """The link to the engine while requests may go to it without this front's Python
        (service/front/native_path.py), which asks the gate (admits) before it sends one."""
        link = self._link
        if link is None or not link.alive:
            return None
        return link

    def admits(self, model: str, version: str, method: str, protocol: str) -> Refusal | None:
        """As the gate's admit for a request the native path read, counted as refused where
        it refuses (as infer() counts the Python path's): under a flood most requests are
        such refusals, and the native path answers them without uvicorn's parser, the
        request cycle or the JSON decoding the Python path would spend on each."""
        refusal = self.gate.admit(model, version, method, protocol)
        if refusal is not None:
            self._note(RequestRefused(model, method, "busy", 0.0, version))
        return refusal

    @property
    def table(self) -> ModelTable:
        """This front's copy of the model table (its generation says how current it is)."""
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
        return await self._call(ModelReady(model, version))  # False, or NotFound saying why

    def refuses(self, model: str, version: str | None, protocol: str) -> Refusal | None:
        """As ModelService.refuses, from this front's gate; the refusal is counted as the
        default method's."""
        entry = self._table.entry(model, version)
        if entry is None:
            return None
        refusal = self.gate.refuses(model, entry.version, entry.signatures, protocol)
        if refusal is not None:
            self._note(RequestRefused(model, oip.DEFAULT_METHOD, "busy", 0.0, version))
        return refusal

    async def infer(self, request: InferRequest) -> InferResponse:
        link = self._require()
        begun = time.perf_counter()
        table = self._table
        if table.generation != link.generation()[0]:
            table = await self._current_table(link)
        try:
            inputs, capacity, checked_at, lane = self._checked(link, table, request)
        except _Refused as refused:
            elapsed_s = time.perf_counter() - begun
            model, method, version = request.model, request.method, request.version
            self._note(RequestRefused(model, method, refused.kind, elapsed_s, version))
            raise refused.error from None
        request_id, pending = self._dispatch(link, request, inputs, capacity, checked_at, lane)
        sent = time.perf_counter()
        try:
            answer = await pending.future
        except asyncio.CancelledError:
            # The engine may be writing the outputs: the slots stay held until it answers.
            # A call cancelled at its deadline (gRPC's) is counted as a deadline passed.
            deadline = deadline_passed(request.timeout_s, time.perf_counter() - begun)
            link.protocol.send_payload(lane_frames.cancel(request_id, deadline))
            raise
        except BaseException:
            pending.settle()
            raise
        return self._response(link, request, pending, sent, answer)

    def _checked(self, link: Link, table: ModelTable, request: InferRequest):
        """(the inputs as (name, datatype, array), room for the outputs, the generation they were
        checked at, how it may travel as a lane request): checked against the model table where
        it has the method, else left for the engine to judge (generation and lane None).
        _Refused for a request refused here."""
        entry = table.entry(request.model, request.version)
        signature = None if entry is None else entry.signatures.get(request.method)
        if signature is None:
            return [(t.name, t.datatype, t.array) for t in request.inputs], 0, None, None
        refused = self.gate.admit(request.model, entry.version, request.method, request.protocol)
        if refused is not None:  # the engine said this queue is full: no crossing
            raise _Refused("busy", refused.error())
        try:
            arrays = bind_inputs(request.inputs, signature)
            asked = select_outputs(signature, request.outputs)
        except ServiceError as exc:
            raise _Refused("client_error", exc) from None
        inputs = [
            (spec.name, spec.datatype, array) for spec, array in zip(signature.inputs, arrays)
        ]
        rows = None
        if entry.max_batch and arrays and arrays[0].ndim:
            rows = arrays[0].shape[0]
        # Upper bounds can be far above what a request produces: an output that outgrows
        # its room comes back inline instead, so the room never crowds out other requests.
        capacity = min(output_bytes(entry, request.method, rows), link.arena.size // 4)
        return inputs, capacity, table.generation, _lane_plan(entry, request, signature, asked)

    def engines_error(self, error: Exception) -> Exception:
        """The engine's answer to a request it refused, once a full queue's has closed the gate
        (returned, not raised here: see gate.Refusal)."""
        if type(error) is QueueFull:
            self.gate.refused(error)
        return error

    def _dispatch(
        self,
        link: Link,
        request: InferRequest,
        inputs,
        capacity: int,
        checked_at: int | None,
        lane: LanePlan | None = None,
    ) -> tuple[int, Pending]:
        """Places the inputs in the arena (unless they are there or in a client's region),
        reserves room for the outputs and sends the descriptor: (its id, what waits on it). A
        request `lane` allows goes as a lane request, which the engine's native lane may answer
        without its Python (runtime_ext/lane/)."""
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
        pending = Pending(asyncio.get_running_loop().create_future(), leases)
        link.pending[request_id] = pending
        refs = _lane_refs(shared, placed, lane) if lane is not None and shared else ()
        if lane is not None and refs is not None:
            placed_inputs = [(p[3] if type(p[3]) is int else 0, p[2]) for p in placed]
            if lane_frames.fits(placed_inputs, len(lane.outputs), refs):
                pending.lane = lane
                link.protocol.send_payload(
                    lane_frames.request(
                        lane.route,
                        request_id,
                        checked_at,
                        lease.offset + size,
                        lease.size - size,
                        lane.mask,
                        placed_inputs,
                        refs,
                    )
                )
                return request_id, pending
        link.protocol.send(
            messages.Infer(
                kind=frames.INFER,
                request_id=request_id,
                model=request.model,
                version=request.version,
                method=request.method,
                inputs=[tuple(p) for p in placed],
                outputs=request.outputs,
                room_offset=lease.offset + size,
                room_size=lease.size - size,
                timeout_s=request.timeout_s,
                client_id=request.id,
                parameters=pickle.dumps(request.parameters) if request.parameters else None,
                checked_at=checked_at,
                shared_memory=to_wire(shared) if shared else None,
            )
        )
        return request_id, pending

    def _response(
        self,
        link: Link,
        request: InferRequest,
        pending: Pending,
        sent: float,
        answer: messages.Done,
    ) -> InferResponse:
        """The engine's answer as the dataplane's response (viewing the outputs in the arena,
        which it holds until released), or the error it refused the request with."""
        self._holding_s += _SMOOTHING * (time.perf_counter() - sent - self._holding_s)
        if not answer.ok:
            pending.settle()
            raise self.engines_error(pickle.loads(answer.payload))
        version, outputs = answer.payload
        region = link.arena.region
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
