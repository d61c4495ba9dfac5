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

This module wires the engine's parts together by job: fronts joining (adoption.py), the control
page they map (control.py), inference messages (dispatch.py) and the declared calls and notes
(calls.py).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import marshal
import socket
import struct

import numpy as np

from service.dataplane.ledger import LANE_FOLD_AT, ServedGroup
from service.dataplane.service import ModelService
from service.dataplane.types import InferRequest
from service.engine import dispatch, pinning
from service.engine.adoption import Adoption
from service.engine.calls import Calls
from service.engine.control import ControlPage
from service.engine.lane_routes import LaneRoutes
from service.engine.metrics_refresh import MetricsRefresh
from service.errors import Aborted, DeadlineExceeded, Unavailable
from service.native_host import import_host
from service.shared import frames, lane_frames, messages
from service.shared.arena import Region
from service.shared.lane_frames import INFER_TAG
from service.shm.binding import window_refusal
from service.shm.metrics import ShmMetrics
from service.shm.refs import from_wire
from service.shm.regions import SharedMemory

log = logging.getLogger(__name__)
_LENGTH = struct.Struct("<I")


class _Sender:
    """Messages to a front, gathered per turn of the event loop and written by its link: under
    load one write carries dozens of answers."""

    __slots__ = ("_link", "_loop", "_outgoing")

    def __init__(self, link, loop: asyncio.AbstractEventLoop):
        self._link = link
        self._loop = loop
        self._outgoing: list[bytes] = []

    def send(self, message: tuple) -> None:
        payload = marshal.dumps(tuple(message))  # a record of messages.py: its plain tuple
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
        self.requests: dict[int, InferRequest] = {}  # of the tasks, by the same key
        self.protocol = _Sender(link, server._loop)

    def _message(
        self, payload: bytes, failure: Exception | None, cancelled: bool, deadline: bool
    ) -> None:
        """A message the lane handed over: a lane request it declined, one it ran that failed
        with `failure`, one it dropped before it ran (`cancelled`: its client went away, or
        stopped waiting at its `deadline`), a cancel of a request of Python's, or a marshal
        tuple."""
        if cancelled:
            return self.server.lane_cancelled(self, payload, deadline)
        if failure is not None:
            return self.server.lane_failed(self, payload, failure)
        if payload[0] == lane_frames.CANCEL_TAG:
            message = messages.Cancel(frames.CANCEL, *lane_frames.read_cancel(payload))
        elif payload[0] == INFER_TAG:
            message = self.server.lane_routes.message(payload)
            if message is None:  # its route is long gone: nothing says what it asked
                return self._unknown_route(payload)
        else:
            message = messages.read(marshal.loads(payload))
        self._received(message)

    def _unknown_route(self, payload: bytes) -> None:
        key = self.server.lane_routes.request_id(payload)
        error = Unavailable("the model changed while the request was on its way; send it again")
        self.protocol.send(dispatch.error(key, error))

    def _received(self, message) -> None:
        kind = message.kind
        if kind == frames.INFER:
            self.server.service.metrics.front_request(self.front_id)
            request = self.server.dispatch.serve_now(self, message)
            if request is not None:
                key = message.request_id
                work = self.server.dispatch.infer(self, key, request)
                task = asyncio.get_running_loop().create_task(work)
                if request.shared_memory is not None:  # even if cancelled before it starts
                    task.add_done_callback(lambda _, held=request.shared_memory: held.close())
                self.tasks[key] = task
                self.requests[key] = request
                task.add_done_callback(lambda _, key=key: self._ended(key))
        elif kind == frames.CANCEL:
            task = self.tasks.get(message.request_id)
            if task is not None:
                if message.deadline:  # the client stopped waiting at its deadline
                    self.requests[message.request_id].cancelled_as = "deadline_exceeded"
                task.cancel()
        elif kind == frames.CALL:
            asyncio.get_running_loop().create_task(self.server.call(self, message))
        elif kind == frames.NOTE:
            self.server.calls.note(message)

    def _ended(self, key: int) -> None:
        self.tasks.pop(key, None)
        self.requests.pop(key, None)

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
        self.fronts: dict[int, _Front] = {}  # by link key
        self._keys = itertools.count(1)
        self._control = ControlPage()
        self._adoption = Adoption(socket_name, secret, self._control.fd, self._adopt)
        self._loop: asyncio.AbstractEventLoop | None = None
        # False until the stored models are open again: before, every model would look unknown.
        self.serving = False
        # The native lane: every front's link thread, the routes they may serve at once.
        self._ethost = import_host()
        self.hub = self._ethost.LaneHub(LANE_FOLD_AT, service.settings.infer_threads)
        self.lane_routes = LaneRoutes()
        self._closed = False
        service.ledger.add_source(self._lane_served)
        service.on_change(self._publish)
        # Client shared memory regions (service/shm/): mapped here, where the programs run.
        self.shm = SharedMemory(service.settings)
        self.shm.lane = self.hub  # the lane binds lane requests' tensors in system regions
        service.metrics.backends.append(ShmMetrics(self.shm))
        self.metrics_refresh = MetricsRefresh(
            service.metrics_text, self._control.metrics, service.settings.metrics_max_age_ms / 1e3
        )
        self.calls = Calls(service, self.shm, self.metrics_refresh)
        self.dispatch = dispatch.Dispatch(service, self.shm)

    def _publish(self) -> None:
        # The lane's routes first: a front that sees the new generation may send requests
        # checked against it at once. None once closed (they hold the models' instances).
        if not self._closed:
            self.lane_routes.publish(self.hub, self.service)
        self._control.write(self.service.generation, self.service.ready, self.serving)

    def _lane_served(self) -> list[ServedGroup]:
        return [
            ServedGroup(*group[:14], np.frombuffer(group[14]), np.frombuffer(group[15]))
            for group in self.hub.served()
        ]

    def start_serving(self) -> None:
        self.serving = True
        self._publish()

    def open(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.hub.inbox_fd, self._drain)
        self._publish()
        self._adoption.open(self._loop)

    def _adopt(self, sock: socket.socket, front_id: int, region: Region) -> None:
        """A front that joined: its socket goes to a link thread of the native lane."""
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
        for key, payload, failure, cancelled, deadline in items:
            front = self.fronts.get(key)
            if front is None:
                continue
            if payload is None:
                front._lost()
                continue
            try:
                front._message(payload, failure, cancelled, deadline)
            except Exception:  # one bad message must not stop the others
                log.exception("a message from front %d could not be read", front.front_id)
        if fold:
            self.service.ledger.fold()

    def lane_failed(self, front: _Front, payload: bytes, failure: Exception) -> None:
        """A lane request that ran and failed (runtime_ext/lane/lane.h): answered with the error
        this failure of an execute means, as if Python had run it, never run again."""
        self.service.metrics.front_request(front.front_id)
        message = self.lane_routes.message(payload)
        if message is None:  # its route is long gone: nothing says which method failed
            return front._unknown_route(payload)
        if isinstance(failure, self._ethost.OutputWindowError):
            # Its execute is in the lane's served log, as Python's ledger has one whose output
            # it then refuses (Dispatch, RequestShm.write_outputs): only the refusal is left.
            name = self.lane_routes.output_name(payload, failure.index)
            ref = from_wire(message.shared_memory).outputs[name]
            refusal = window_refusal(failure, name, ref)
            return front.protocol.send(dispatch.error(message.request_id, refusal))
        shapes = [item[2] for item in message.inputs]
        failed = self.service.execute_failed(
            message.model, message.version, message.method, failure, shapes
        )
        front.protocol.send(dispatch.error(message.request_id, failed))

    def lane_cancelled(self, front: _Front, payload: bytes, deadline: bool) -> None:
        """A lane request the lane dropped while it waited for an instance, its client gone
        (`deadline`: at the request's deadline): counted as cancelled, or as a deadline passed,
        as a Python-scheduled request's cancel is (it never ran), and answered, so that the
        front frees its slots."""
        self.service.metrics.front_request(front.front_id)
        message = self.lane_routes.message(payload)
        if message is None:  # its route is long gone: nothing says which method it was for
            return front._unknown_route(payload)
        service = self.service
        outcome = "deadline_exceeded" if deadline else "cancelled"
        service.record_refused(message.model, message.method, outcome, 0.0, message.version)
        error = (
            DeadlineExceeded("the request's deadline passed before an instance was free")
            if deadline
            else Aborted("the client went away")
        )
        front.protocol.send(dispatch.error(message.request_id, error))

    async def call(self, front: _Front, message: messages.Call) -> None:
        front.protocol.send(await self.calls.answer(message))

    def close(self) -> None:
        self._adoption.close()
        self.metrics_refresh.close()
        if self._loop is not None:
            self._loop.remove_reader(self.hub.inbox_fd)
        for front in list(self.fronts.values()):
            front.link.stop()
        self.fronts.clear()
        self.service.ledger.fold()  # what the lane served, before its routes go
        self._closed = True
        self.hub.publish(0, 0.0, [])
        self.shm.close()
