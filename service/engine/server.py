"""The engine process: the one ModelService (store, ingest, models, scheduler, statistics, GPU),
serving every front over its own socket and arena.

Requests from all fronts meet here, so dynamic batching merges them and one queue per model
method admits them in arrival order whatever protocol or front they came through. An inference
message names tensors by offset in the sending front's arena; the engine views them there (no
copy), runs the request through the dataplane and writes the outputs into the room the front
reserved, answering with offsets again.

Each front's socket is read by a thread of the native lane (runtime_ext/lane/): a lane request
that can run at once is executed and answered there, without this process's Python, so small
requests to many fronts are not bounded by one Python thread; every other message reaches the
event loop through the lane's inbox (one eventfd) and is served as before. The lane serves the
routes published here at every change to what is served (ModelService.lane_routes), and counts
what it served into the one ledger (service/dataplane/ledger.py) when that is read.

The control page (a shared page every front maps) carries the model-table generation and the
readiness; it is written before the answer to whatever changed them, so no front can act on a
table older than an answer a client already has.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import marshal
import math
import mmap
import os
import pickle
import socket
import struct
import threading

from service import rules
from service.dataplane.ledger import FOLD_AT, Served
from service.dataplane.service import ModelService
from service.dataplane.types import InferRequest, Tensor
from service.dtypes import BY_DATATYPE
from service.engine import handshake, pinning
from service.engine.lane_routes import LaneRoutes
from service.engine.outputs import OutputRoom, place
from service.errors import Aborted, ServiceError, Unavailable, invalid
from service.ipc import frames
from service.ipc.arena import Region
from service.ipc.lane_frames import INFER_TAG
from service.native_host import import_host
from service.shm.binding import RequestShm
from service.shm.metrics import ShmMetrics
from service.shm.refs import from_wire
from service.shm.regions import SharedMemory

log = logging.getLogger(__name__)
# Fire-and-forget notes the fronts send (counts of what they refused themselves).
_NOTES = frozenset({"record_refused", "upload_refused", "arena_usage"})
# Coroutines of ModelService that fronts must not call by name.
_NOT_CALLS = frozenset({"start", "stop", "deploy", "infer"})
_LENGTH = struct.Struct("<I")


class InternalError(Exception):
    """Stands in for an unexpected engine-side failure in the front: answered as a 500 there,
    with the details in the engine's log."""


def _callable(name: str) -> bool:
    member = getattr(SharedMemory if name.startswith("shm_") else ModelService, name, None)
    return (
        not name.startswith("_")
        and name not in _NOT_CALLS
        and member is not None
        and inspect.iscoroutinefunction(member)
    )


class _Sender:
    """Messages to a front, gathered per turn of the event loop and written by its link: under
    load one write carries dozens of answers."""

    __slots__ = ("_link", "_loop", "_outgoing")

    def __init__(self, link, loop: asyncio.AbstractEventLoop):
        self._link = link
        self._loop = loop
        self._outgoing: list[bytes] = []

    def send(self, message: tuple) -> None:
        payload = marshal.dumps(message)
        if not self._outgoing:
            self._loop.call_soon(self._flush)
        self._outgoing += (_LENGTH.pack(len(payload)), payload)

    def _flush(self) -> None:
        outgoing, self._outgoing = self._outgoing, []
        self._link.send(b"".join(outgoing))  # a link that ended drops it


class _Front:
    """One connected front: its link (socket and thread), its arena as mapped here, its
    requests in flight."""

    def __init__(self, server: EngineServer, key: int, front_id: int, region: Region, link):
        self.server = server
        self.key = key  # names its link in the lane's inbox
        self.front_id = front_id
        self.region = region
        self.link = link
        self.tasks: dict[int, asyncio.Task] = {}
        self.protocol = _Sender(link, server._loop)

    def _message(self, payload: bytes, failure: Exception | None = None) -> None:
        """A message the lane handed over: a lane request it declined, one it ran that failed
        with `failure`, or a marshal tuple."""
        if failure is not None:
            return self.server.lane_failed(self, payload, failure)
        if payload[0] == INFER_TAG:
            message = self.server.lane_routes.message(payload)
            if message is None:  # its route is long gone: nothing says what it asked
                return self._unknown_route(payload)
        else:
            message = marshal.loads(payload)
        self._received(message)

    def _unknown_route(self, payload: bytes) -> None:
        key = self.server.lane_routes.request_id(payload)
        error = Unavailable("the model changed while the request was on its way; send it again")
        self.protocol.send((frames.DONE, key, False, pickle.dumps(error)))

    def _received(self, message: tuple) -> None:
        kind = message[0]
        if kind == frames.INFER:
            self.server.service.metrics.front_request(self.front_id)
            request = self.server.serve_now(self, message)
            if request is not None:
                key = message[1]
                work = self.server.infer(self, key, request)
                task = asyncio.get_running_loop().create_task(work)
                if request.shared_memory is not None:  # even if cancelled before it starts
                    task.add_done_callback(lambda _, held=request.shared_memory: held.close())
                self.tasks[key] = task
                task.add_done_callback(lambda _, key=key: self.tasks.pop(key, None))
        elif kind == frames.CANCEL:
            task = self.tasks.get(message[1])
            if task is not None:
                task.cancel()
        elif kind == frames.CALL:
            asyncio.get_running_loop().create_task(self.server.call(self, message))
        elif kind == frames.NOTE:
            self.server.note(message)

    def _lost(self) -> None:
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        self.server.fronts.pop(self.key, None)
        self.link.stop()  # its thread has ended: nothing of the lane touches the arena now
        asyncio.get_running_loop().create_task(self._release(tasks))
        log.info("front %d disconnected", self.front_id)

    async def _release(self, tasks: list[asyncio.Task]) -> None:
        await asyncio.gather(*tasks, return_exceptions=True)
        pinning.unpin(self.region)


class EngineServer:
    def __init__(self, service: ModelService, socket_name: str, secret: str):
        self.service = service
        self.socket_name = socket_name
        self.secret = secret
        self.fronts: dict[int, _Front] = {}  # by link key
        self._keys = itertools.count(1)
        self._control_fd = os.memfd_create("etrt-control", os.MFD_CLOEXEC)
        os.ftruncate(self._control_fd, handshake.CONTROL_BYTES)
        self._control = mmap.mmap(self._control_fd, handshake.CONTROL_BYTES)
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # False until the stored models are open again: before, every model would look unknown.
        self.serving = False
        # The native lane: every front's link thread, the routes they may serve at once.
        self._ethost = import_host()
        self.hub = self._ethost.LaneHub(FOLD_AT, service.settings.infer_threads)
        self.lane_routes = LaneRoutes()
        self._closed = False
        service.ledger.add_source(self._lane_served)
        service.on_change(self._publish)
        # Client shared memory regions (service/shm/): mapped here, where the programs run.
        self.shm = SharedMemory(service.settings)
        service.metrics.backends.append(ShmMetrics(self.shm))

    def _publish(self) -> None:
        # The lane's routes first: a front that sees the new generation may send requests
        # checked against it at once. None once closed (they hold the models' instances).
        if not self._closed:
            self.lane_routes.publish(self.hub, self.service)
        handshake.CONTROL.pack_into(
            self._control,
            0,
            self.service.generation,
            int(self.service.ready),
            int(self.serving),
        )

    def _lane_served(self) -> list[Served]:
        return [Served(*record) for record in self.hub.served()]

    def start_serving(self) -> None:
        self.serving = True
        self._publish()

    # -- fronts joining ------------------------------------------------------------------------

    def open(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.hub.inbox_fd, self._drain)
        self._publish()
        self._listener = handshake.listen(self.socket_name)
        self._accepting = threading.Thread(
            target=self._accept_loop, name="engine-accept", daemon=True
        )
        self._accepting.start()

    def _accept_loop(self) -> None:
        """Handshakes block (and pinning an arena takes a while), so they run here, not on the
        event loop."""
        while True:
            try:
                sock, front_id, arena_fd = handshake.accept(self._listener, self.secret)
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
            self._loop.call_soon_threadsafe(self._adopt, sock, front_id, region)

    def _adopt(self, sock: socket.socket, front_id: int, region: Region) -> None:
        key = next(self._keys)
        try:
            link = self._ethost.attach_front(
                self.hub, sock.detach(), key, front_id, region.address, region.size
            )
        except OSError as exc:
            log.warning("front %d could not join: %s", front_id, exc)
            pinning.unpin(region)
            return
        self.fronts[key] = _Front(self, key, front_id, region, link)
        log.info("front %d joined", front_id)

    def _drain(self) -> None:
        """What the lane handed over since the last look (the inbox's eventfd woke the loop)."""
        items, fold = self.hub.drain()
        for key, payload, failure in items:
            front = self.fronts.get(key)
            if front is None:
                continue
            if payload is None:
                front._lost()
                continue
            try:
                front._message(payload, failure)
            except Exception:  # one bad message must not stop the others
                log.exception("a message from front %d could not be read", front.front_id)
        if fold:
            self.service.ledger.fold()

    def close(self) -> None:
        if self._listener is not None:
            # Closing alone does not wake a thread blocked in accept(); shutting it down does.
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            self._accepting.join(timeout=5)
        if self._loop is not None:
            self._loop.remove_reader(self.hub.inbox_fd)
        for front in list(self.fronts.values()):
            front.link.stop()
        self.fronts.clear()
        self.service.ledger.fold()  # what the lane served, before its routes go
        self._closed = True
        self.hub.publish(0, 0.0, [])
        self.shm.close()

    # -- requests ------------------------------------------------------------------------------

    def serve_now(self, front: _Front, message: tuple) -> InferRequest | None:
        """Answers an inference message at once when it can run without a wait (most small
        requests on an idle enough engine: see ModelService.infer_now), or when it is malformed;
        otherwise returns its request for infer(), in a task of its own."""
        key, model = message[1], message[2]
        try:
            if len(message) > 13 and message[13]:  # tensors in client shared memory
                return self._shm_request(front, message)
            arrays = [_array(front.region, *item) for item in message[5]]
            # Outputs are written by the execute straight into the room the front reserved.
            room = OutputRoom(front.region, message[7], message[8])
            # Inputs the front checked against the signatures served now may run at once.
            if message[12] == self.service.generation:
                answer = self.service.infer_now(
                    model, message[3], message[4], arrays, message[6], room
                )
                if answer is not None:
                    self._answer(front, key, *answer, room)
                    return None
            return _request(message, arrays, room)
        except ServiceError as exc:
            front.protocol.send((frames.DONE, key, False, pickle.dumps(exc)))
        except Exception:
            self._failed(front, key, model)
        return None

    def lane_failed(self, front: _Front, payload: bytes, failure: Exception) -> None:
        """A lane request that ran and failed (runtime_ext/lane/lane.h): answered with the error
        this failure of an execute means, as if Python had run it, never run again."""
        self.service.metrics.front_request(front.front_id)
        key = self.lane_routes.request_id(payload)
        message = self.lane_routes.message(payload)
        if message is None:  # its route is long gone: nothing says which method failed
            return front._unknown_route(payload)
        error = self.service.execute_failed(message[2], message[3], message[4], failure)
        front.protocol.send((frames.DONE, key, False, pickle.dumps(error)))

    def _shm_request(self, front: _Front, message: tuple) -> InferRequest:
        """The request with its inputs viewed in their regions (service/shm/), which it holds
        until it is answered; it always takes infer()'s path."""
        shm = RequestShm(self.shm, from_wire(message[13]))
        try:
            arrays = [
                _array(front.region, *item) if type(item[3]) is int else shm.input(*item).array
                for item in message[5]
            ]
            request = _request(message, arrays, OutputRoom(front.region, message[7], message[8]))
        except BaseException:
            shm.close()
            raise
        request.shared_memory = shm
        return request

    async def infer(self, front: _Front, key: int, request: InferRequest) -> None:
        try:
            response = await self.service.infer(request)
            shm = request.shared_memory
            written = shm.write_outputs(response.outputs) if shm is not None else ()
            outputs = [(tensor.name, tensor.datatype, tensor.array) for tensor in response.outputs]
            self._answer(front, key, response.version, outputs, request.output_room, written)
        except ServiceError as exc:
            front.protocol.send((frames.DONE, key, False, pickle.dumps(exc)))
        except asyncio.CancelledError:
            front.protocol.send(
                (frames.DONE, key, False, pickle.dumps(Aborted("the client went away")))
            )
        except Exception:
            self._failed(front, key, request.model)

    @staticmethod
    def _answer(
        front: _Front, key: int, version: str, outputs: list[tuple], room: OutputRoom, written=()
    ) -> None:
        placed = place(room, outputs, written)
        front.protocol.send((frames.DONE, key, True, (version, placed)))

    @staticmethod
    def _failed(front: _Front, key: int, model: str) -> None:
        log.exception("inference of model %r failed in the engine", model)
        failure = InternalError("the inference engine failed; see its log")
        front.protocol.send((frames.DONE, key, False, pickle.dumps(failure)))

    async def call(self, front: _Front, message: tuple) -> None:
        _, key, name, args = message
        try:
            if not _callable(name):
                raise AttributeError(f"the engine has no call {name!r}")
            target = self.shm if name.startswith("shm_") else self.service
            value = await getattr(target, name)(*pickle.loads(args))
            answer = (True, pickle.dumps(value, protocol=5))
        except ServiceError as exc:
            answer = (False, pickle.dumps(exc))
        except Exception:
            log.exception("engine call %s failed", name)
            answer = (
                False,
                pickle.dumps(InternalError(f"the engine's {name} failed; see its log")),
            )
        front.protocol.send((frames.RESULT, key, *answer))

    def note(self, message: tuple) -> None:
        _, _, name, args = message
        if name in _NOTES:
            getattr(self.service, name)(*pickle.loads(args))


def _request(message: tuple, arrays: list, room: OutputRoom) -> InferRequest:
    """`arrays`: the message's inputs, viewed where they lie (_array, RequestShm.input)."""
    (_, _, model, version, method, inputs, outputs, _, _, timeout_s) = message[:10]
    request_id, parameters, checked_at = message[10:13]
    return InferRequest(
        model=model,
        inputs=[Tensor(item[0], item[1], array) for item, array in zip(inputs, arrays)],
        method=method,
        version=version,
        id=request_id,
        outputs=outputs,
        parameters=pickle.loads(parameters) if parameters else {},
        timeout_s=timeout_s,
        checked_at=checked_at,
        output_room=room,
    )


def _array(region: Region, name: str, datatype: str, shape, offset: int):
    """An input as a view of the front's arena at `offset` (no copy)."""
    dtype = BY_DATATYPE.get(datatype)
    if dtype is None:
        raise invalid(rules.INPUT_DATATYPE, f"input {name!r}: unknown datatype {datatype!r}")
    count = math.prod(shape)
    if offset < 0 or offset + count * dtype.itemsize > region.size:
        raise invalid(rules.INPUT_SHAPE, f"input {name!r} lies outside its shared memory slot")
    return region.array(offset, dtype.carrier, tuple(shape))
