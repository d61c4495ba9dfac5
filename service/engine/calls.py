"""The engine's side of the front-engine contract (service/shared/contract.py): the one handler of
each call and note a front may send, and nothing else. A record whose type has no handler here
is refused, so no method of the engine is reachable from a front by its name; an answer of a type
other than the one the call declares fails here, in the engine's log, not in a front.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from service.dataplane.service import ModelService
from service.engine.metrics_refresh import MetricsRefresh
from service.errors import ServiceError
from service.shared import contract as c
from service.shared import messages
from service.shared.frames import RESULT
from service.shm.regions import SharedMemory

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EngineParts:
    """What the handlers answer from."""

    service: ModelService
    shm: SharedMemory
    metrics: MetricsRefresh  # renders the /metrics page and keeps the fronts' copy fresh


_Handler = Callable[[EngineParts, c.EngineCall], Awaitable[object]]
HANDLERS: dict[type[c.EngineCall], _Handler] = {
    c.GetTable: lambda parts, call: parts.service.table(),
    c.ModelReady: lambda parts, call: parts.service.model_ready(call.model, call.version),
    c.Signatures: lambda parts, call: parts.service.signatures(call.model, call.version),
    c.ServedVersions: lambda parts, call: parts.service.served_versions(call.model),
    c.ModelConfig: lambda parts, call: parts.service.model_config(call.model, call.version),
    c.ModelStats: lambda parts, call: parts.service.model_stats(call.model, call.version),
    c.ListModels: lambda parts, call: parts.service.list_models(),
    c.Describe: lambda parts, call: parts.service.describe(call.model, call.version),
    c.MetricsText: lambda parts, call: parts.metrics.page(),
    c.RepositoryIndex: lambda parts, call: parts.service.repository_index(),
    c.Deploy: lambda parts, call: parts.service.deploy(call.upload, call.received_s),
    c.Reload: lambda parts, call: parts.service.load_model(call.model, None, call.config),
    c.Unload: lambda parts, call: parts.service.unload_model(call.model),
    c.Delete: lambda parts, call: parts.service.delete(call.model, call.version),
    c.ShmRegisterSystem: lambda parts, call: parts.shm.shm_register_system(
        call.name, call.key, call.offset, call.byte_size
    ),
    c.ShmRegisterCuda: lambda parts, call: parts.shm.shm_register_cuda(
        call.name, call.raw_handle, call.device_id, call.byte_size
    ),
    c.ShmStatus: lambda parts, call: parts.shm.shm_status(call.kind, call.name),
    c.ShmUnregister: lambda parts, call: parts.shm.shm_unregister(call.kind, call.name),
}

_NoteHandler = Callable[[EngineParts, object], None]
NOTE_HANDLERS: dict[type, _NoteHandler] = {
    c.RequestRefused: lambda parts, note: parts.service.record_refused(
        note.model, note.method, note.outcome, note.elapsed_s, note.version
    ),
    c.UploadRefused: lambda parts, note: parts.service.upload_refused(
        note.model, note.error, note.elapsed_s
    ),
    c.ArenaUsage: lambda parts, note: parts.service.arena_usage(
        note.front, note.in_use, note.size, note.native_requests
    ),
    c.MetricsScraped: lambda parts, note: parts.metrics.scraped(),
}


class ContractError(Exception):
    """A front sent what the contract does not have (a front of another build)."""


class Calls:
    """Serves the calls and notes of every front over one ModelService and its shared memory
    regions."""

    def __init__(self, service: ModelService, shm: SharedMemory, metrics: MetricsRefresh):
        self._parts = EngineParts(service, shm, metrics)

    async def answer(self, message: messages.Call) -> messages.Result:
        name = "call"
        try:
            call = pickle.loads(message.call)
            name = type(call).__name__
            handler = HANDLERS.get(type(call))
            if handler is None:
                raise ContractError(f"the engine has no call {name}")
            value = await handler(self._parts, call)
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
        handler(self._parts, note)
