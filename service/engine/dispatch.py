"""Inference messages from the fronts (messages.Infer, and the lane requests the native lane
declined), served by the one ModelService: the inputs viewed where they lie in the front's arena
or in a client's shared memory region (no copy), the outputs written by the execute into the room
the front reserved, the answer (messages.Done) naming where they are.
"""

from __future__ import annotations

import asyncio
import logging
import math
import pickle

from service import rules
from service.dataplane.service import ModelService
from service.dataplane.types import InferRequest, Tensor
from service.dtypes import BY_DATATYPE
from service.engine.outputs import OutputRoom, place
from service.errors import Aborted, ServiceError, invalid
from service.shared import frames, messages
from service.shared.arena import Region
from service.shared.contract import EngineFailed
from service.shm.binding import RequestShm
from service.shm.refs import from_wire
from service.shm.regions import SharedMemory

log = logging.getLogger(__name__)


def error(request_id: int, error: Exception) -> messages.Done:
    return messages.Done(frames.DONE, request_id, False, pickle.dumps(error))


class Dispatch:
    """`front` below: the connected front a message came from (server._Front: its arena
    `region` and its `protocol`, which sends messages back)."""

    def __init__(self, service: ModelService, shm: SharedMemory):
        self.service = service
        self.shm = shm

    def serve_now(self, front, message: messages.Infer) -> InferRequest | None:
        """Answers an inference message at once when it can run without a wait (most small
        requests on an idle enough engine: see ModelService.infer_now), or when it is malformed;
        otherwise returns its request for infer(), in a task of its own."""
        key, model = message.request_id, message.model
        try:
            if message.shared_memory:  # tensors in client shared memory
                return self._shm_request(front, message)
            arrays = [_array(front.region, *item) for item in message.inputs]
            # Outputs are written by the execute straight into the room the front reserved.
            room = OutputRoom(front.region, message.room_offset, message.room_size)
            # Inputs the front checked against the signatures served now may run at once.
            if message.checked_at == self.service.generation:
                answer = self.service.infer_now(
                    model, message.version, message.method, arrays, message.outputs, room
                )
                if answer is not None:
                    self._answer(front, key, *answer, room)
                    return None
            return _request(message, arrays, room)
        except ServiceError as exc:
            front.protocol.send(error(key, exc))
        except Exception:
            self._failed(front, key, model)
        return None

    def _shm_request(self, front, message: messages.Infer) -> InferRequest | None:
        """Serves a request with tensors in client regions (service/shm/), which it holds until
        it is answered: at once, as serve_now serves any other, when infer_now can run it
        (outputs asked into a region written there by the execute itself); else its request,
        for infer(). The inline way spares the engine's one thread the task, the worker
        thread's hand-off and the copies that otherwise cost it more than the execute."""
        shm = RequestShm(self.shm, from_wire(message.shared_memory))
        try:
            arrays = [
                _array(front.region, *item) if type(item[3]) is int else shm.input(*item).array
                for item in message.inputs
            ]
            room = OutputRoom(front.region, message.room_offset, message.room_size)
            if message.checked_at == self.service.generation:
                answer = self.service.infer_now(
                    message.model, message.version, message.method, arrays, message.outputs, shm
                )
                if answer is not None:
                    version, outputs = answer
                    written = shm.write_outputs([Tensor(*output) for output in outputs])
                    self.shm.count_request("inline")
                    self._answer(front, message.request_id, version, outputs, room, written)
                    shm.close()
                    return None
            request = _request(message, arrays, room)
        except BaseException:
            shm.close()
            raise
        self.shm.count_request("queued")
        request.shared_memory = shm
        return request

    async def infer(self, front, key: int, request: InferRequest) -> None:
        try:
            response = await self.service.infer(request)
            shm = request.shared_memory
            written = shm.write_outputs(response.outputs) if shm is not None else ()
            outputs = [(tensor.name, tensor.datatype, tensor.array) for tensor in response.outputs]
            self._answer(front, key, response.version, outputs, request.output_room, written)
        except ServiceError as exc:
            front.protocol.send(error(key, exc))
        except asyncio.CancelledError:
            front.protocol.send(error(key, Aborted("the client went away")))
        except Exception:
            self._failed(front, key, request.model)

    @staticmethod
    def _answer(
        front, key: int, version: str, outputs: list[tuple], room: OutputRoom, written=()
    ) -> None:
        placed = place(room, outputs, written)
        front.protocol.send(messages.Done(frames.DONE, key, True, (version, placed)))

    @staticmethod
    def _failed(front, key: int, model: str) -> None:
        log.exception("inference of model %r failed in the engine", model)
        front.protocol.send(error(key, EngineFailed("the inference engine failed; see its log")))


def _request(message: messages.Infer, arrays: list, room: OutputRoom) -> InferRequest:
    """`arrays`: the message's inputs, viewed where they lie (_array, RequestShm.input)."""
    return InferRequest(
        model=message.model,
        inputs=[Tensor(item[0], item[1], array) for item, array in zip(message.inputs, arrays)],
        method=message.method,
        version=message.version,
        id=message.client_id,
        outputs=message.outputs,
        parameters=pickle.loads(message.parameters) if message.parameters else {},
        timeout_s=message.timeout_s,
        checked_at=message.checked_at,
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
