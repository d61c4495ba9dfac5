"""The engine's side of the front-engine contract (service/shared/contract.py): the one handler of
each call and note a front may send, and nothing else. A record whose type has no handler here
is refused, so no method of the engine is reachable from a front by its name; an answer of a type
other than the one the call declares fails here, in the engine's log, not in a front.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Awaitable, Callable

from service.dataplane.service import ModelService
from service.errors import ServiceError
from service.shared import contract as c
from service.shared import messages
from service.shared.frames import RESULT
from service.shm.regions import SharedMemory

log = logging.getLogger(__name__)

_Handler = Callable[[ModelService, SharedMemory, c.EngineCall], Awaitable[object]]
HANDLERS: dict[type[c.EngineCall], _Handler] = {
    c.GetTable: lambda service, shm, call: service.table(),
    c.ModelReady: lambda service, shm, call: service.model_ready(call.model, call.version),
    c.Signatures: lambda service, shm, call: service.signatures(call.model, call.version),
    c.ServedVersions: lambda service, shm, call: service.served_versions(call.model),
    c.ModelConfig: lambda service, shm, call: service.model_config(call.model, call.version),
    c.ModelStats: lambda service, shm, call: service.model_stats(call.model, call.version),
    c.ListModels: lambda service, shm, call: service.list_models(),
    c.Describe: lambda service, shm, call: service.describe(call.model, call.version),
    c.MetricsText: lambda service, shm, call: service.metrics_text(),
    c.RepositoryIndex: lambda service, shm, call: service.repository_index(),
    c.Deploy: lambda service, shm, call: service.deploy(call.upload, call.received_s),
    c.Reload: lambda service, shm, call: service.load_model(call.model, None, call.config),
    c.Unload: lambda service, shm, call: service.unload_model(call.model),
    c.Delete: lambda service, shm, call: service.delete(call.model, call.version),
    c.ShmRegisterSystem: lambda service, shm, call: shm.shm_register_system(
        call.name, call.key, call.offset, call.byte_size
    ),
    c.ShmRegisterCuda: lambda service, shm, call: shm.shm_register_cuda(
        call.name, call.raw_handle, call.device_id, call.byte_size
    ),
    c.ShmStatus: lambda service, shm, call: shm.shm_status(call.kind, call.name),
    c.ShmUnregister: lambda service, shm, call: shm.shm_unregister(call.kind, call.name),
}

_NoteHandler = Callable[[ModelService, object], None]
NOTE_HANDLERS: dict[type, _NoteHandler] = {
    c.RequestRefused: lambda service, note: service.record_refused(
        note.model, note.method, note.outcome, note.elapsed_s, note.version
    ),
    c.UploadRefused: lambda service, note: service.upload_refused(
        note.model, note.error, note.elapsed_s
    ),
    c.ArenaUsage: lambda service, note: service.arena_usage(
        note.front, note.in_use, note.size, note.native_requests
    ),
}


class ContractError(Exception):
    """A front sent what the contract does not have (a front of another build)."""


class Calls:
    """Serves the calls and notes of every front over one ModelService and its shared memory
    regions."""

    def __init__(self, service: ModelService, shm: SharedMemory):
        self._service = service
        self._shm = shm

    async def answer(self, message: messages.Call) -> messages.Result:
        name = "call"
        try:
            call = pickle.loads(message.call)
            name = type(call).__name__
            handler = HANDLERS.get(type(call))
            if handler is None:
                raise ContractError(f"the engine has no call {name}")
            value = await handler(self._service, self._shm, call)
            if not isinstance(value, call.answers):
                raise ContractError(f"{name} answered {type(value).__name__}, not {call.answers}")
            ok, payload = True, pickle.dumps(value, protocol=5)
        except ServiceError as exc:
            ok, payload = False, pickle.dumps(exc)
        except Exception:
            log.exception("engine call %s failed", name)
            error = c.EngineFailed(f"the engine's {name} failed; see its log")
            ok, payload = False, pickle.dumps(error)
        return messages.Result(RESULT, message.call_id, ok, payload)

    def note(self, message: messages.Note) -> None:
        note = pickle.loads(message.note)
        handler = NOTE_HANDLERS.get(type(note))
        if handler is None:
            raise ContractError(f"the engine has no note {type(note).__name__}")
        handler(self._service, note)
