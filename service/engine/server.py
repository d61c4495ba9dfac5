"""The engine process: the one ModelService (store, ingest, models, scheduler, statistics, GPU),
serving every front over its own socket and arena.

Requests from all fronts meet here, so dynamic batching merges them and one queue per model
method admits them in arrival order whatever protocol or front they came through. An inference
message names tensors by offset in the sending front's arena; the engine views them there (no
copy), runs the request through the dataplane and writes the outputs into the room the front
reserved, answering with offsets again.

The control page (a shared page every front maps) carries the model-table generation and the
readiness; it is written before the answer to whatever changed them, so no front can act on a
table older than an answer a client already has.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import mmap
import os
import pickle
import socket
import threading

from service import rules
from service.dataplane.service import ModelService
from service.dataplane.types import InferRequest, Tensor
from service.dtypes import BY_DATATYPE
from service.engine import handshake, pinning
from service.engine.outputs import OutputRoom, place
from service.errors import Aborted, ServiceError, invalid
from service.ipc import frames
from service.ipc.arena import Region
from service.shm.binding import RequestShm
from service.shm.metrics import ShmMetrics
from service.shm.refs import from_wire
from service.shm.regions import SharedMemory

log = logging.getLogger(__name__)
# Fire-and-forget notes the fronts send (counts of what they refused themselves).
_NOTES = frozenset({"record_refused", "upload_refused", "arena_usage"})
# Coroutines of ModelService that fronts must not call by name.
_NOT_CALLS = frozenset({"start", "stop", "deploy", "infer"})


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


class _Front:
    """One connected front: its socket, its arena as mapped here, its requests in flight."""

    def __init__(self, server: EngineServer, front_id: int, region: Region):
        self.server = server
        self.front_id = front_id
        self.region = region
        self.tasks: dict[int, asyncio.Task] = {}
        self.protocol = frames.FrameProtocol(self._received, self._lost)

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

    def _lost(self, exc) -> None:
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        self.server.fronts.discard(self)
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
        self.fronts: set[_Front] = set()
        self._control_fd = os.memfd_create("etrt-control", os.MFD_CLOEXEC)
        os.ftruncate(self._control_fd, handshake.CONTROL_BYTES)
        self._control = mmap.mmap(self._control_fd, handshake.CONTROL_BYTES)
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # False until the stored models are open again: before, every model would look unknown.
        self.serving = False
        service.on_change(self._publish)
        # Client shared memory regions (service/shm/): mapped here, where the programs run.
        self.shm = SharedMemory(service.settings)
        service.metrics.backends.append(ShmMetrics(self.shm))

    def _publish(self) -> None:
        handshake.CONTROL.pack_into(
            self._control,
            0,
            self.service.generation,
            int(self.service.ready),
            int(self.serving),
        )

    def start_serving(self) -> None:
        self.serving = True
        self._publish()

    # -- fronts joining ------------------------------------------------------------------------

    def open(self) -> None:
        self._loop = asyncio.get_running_loop()
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
        front = _Front(self, front_id, region)
        self.fronts.add(front)
        self._loop.create_task(self._loop.connect_accepted_socket(lambda: front.protocol, sock))
        log.info("front %d joined", front_id)

    def close(self) -> None:
        if self._listener is not None:
            # Closing alone does not wake a thread blocked in accept(); shutting it down does.
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            self._accepting.join(timeout=5)
        for front in list(self.fronts):
            if front.protocol.transport is not None:
                front.protocol.transport.close()
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
