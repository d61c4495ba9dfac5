"""The engine's GPU faults and restarts, in one file that outlives each engine process.

A sticky CUDA error poisons the engine's context: only a new process recovers, so the engine
exits and the supervisor starts another. What must survive that -- which model poisoned the
context how often (quarantine), the counters /metrics shows, why the server is not ready -- is
kept here: the supervisor creates the file for the server's run (ETRT_ENGINE_EVENTS) and records
each engine restart, the engine records each fault and each lifted quarantine, and fronts read
the latest to say why the server is not ready while the engine is away. One JSON object per line,
each appended in one write (shorter than PIPE_BUF), so no reader sees half of one.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

log = logging.getLogger(__name__)
EVENTS_ENV = "ETRT_ENGINE_EVENTS"
# The engine's exit status after a sticky GPU fault (EX_TEMPFAIL): the supervisor restarts it
# as such (no early-exit count toward giving up; backoff by faults in a row).
GPU_FAULT_EXIT = 75
_CLIP = 400  # characters kept of each text field, so a line stays one write


@dataclass(frozen=True)
class GpuFault:
    """A sticky error seen after an execute (or a load) of `model`: its context is poisoned."""

    at: float
    model: str
    version: str
    method: str
    inputs: str  # what the request carried: names, dtypes, shapes
    reason: str  # the CUDA runtime's words

    def describe(self) -> str:
        return (
            f"model {self.model!r} version {self.version} method {self.method!r} poisoned the GPU "
            f"context ({self.reason}) with inputs {self.inputs}"
        )


@dataclass(frozen=True)
class Restart:
    """The supervisor started the engine again: `reason` gpu_fault, crashed or killed."""

    at: float
    reason: str
    detail: str
    backoff_s: float


@dataclass(frozen=True)
class Lifted:
    """A quarantine lifted by a load or a redeploy of `model`: its faults before count no more."""

    at: float
    model: str


Event = GpuFault | Restart | Lifted
_KINDS = {"fault": GpuFault, "restart": Restart, "lifted": Lifted}
_NAMES = {cls: name for name, cls in _KINDS.items()}


class EngineEvents:
    """The file of this server's run; `path` None (a service without a supervisor) keeps
    nothing."""

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None

    @classmethod
    def from_env(cls) -> EngineEvents:
        return cls(os.environ.get(EVENTS_ENV))

    def append(self, event: Event) -> None:
        if self.path is None:
            return
        record = {
            key: value[:_CLIP] if isinstance(value, str) else value
            for key, value in asdict(event).items()
        }
        line = json.dumps({"kind": _NAMES[type(event)], **record}) + "\n"
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError as exc:  # what it records is lost; what it serves must not be
            log.warning("could not record %s in %s: %s", event, self.path, exc)

    def read(self) -> list[Event]:
        if self.path is None:
            return []
        try:
            lines = self.path.read_text().splitlines()
        except OSError:
            return []
        events = []
        for line in lines:
            try:
                record = json.loads(line)
                cls = _KINDS[record.pop("kind")]
                events.append(cls(**{f.name: record[f.name] for f in fields(cls)}))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a crash mid-write says nothing
        return events

    def why_away(self, within_s: float) -> str | None:
        """Why the engine is away or not ready, from the last fault or restart if it is at most
        `within_s` old (None: nothing recent)."""
        events = [e for e in self.read() if not isinstance(e, Lifted)]
        if not events or time.time() - events[-1].at > within_s:
            return None
        last = events[-1]
        if isinstance(last, GpuFault):
            return f"the engine is restarting: {last.describe()}"
        why = f"the engine is restarting ({last.reason}, {last.detail}"
        if last.backoff_s:
            why += f", after a backoff of {last.backoff_s:.1f} s"
        why += ")"
        fault = events[-2] if len(events) > 1 else None
        if last.reason == "gpu_fault" and isinstance(fault, GpuFault):
            why += f": {fault.describe()}"
        return why
