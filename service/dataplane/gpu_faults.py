"""Sticky GPU faults: which failures poisoned the device context, whose fault, and quarantine.

An illegal or misaligned address, a launch failure or an ECC error poisons a CUDA context: the
request that met it fails, and so does every later call in the process, on every model. So after
an execute or a load fails, the engine asks the native host (ethost.sticky_fault():
DeviceMemory::context_health, the one definition, for executes of the native lane and of the
Python scheduler alike). A failure after which the context works is the request's (answered as
before); one after which it does not is a GPU fault: the engine records it
(service/shared/engine_events.py), stops being ready, answers 503 with Retry-After to what it
holds, and exits for the supervisor to start a clean process.

Whose fault: whichever execute synchronizes first after the fault sees it, so the native host
names every model with an execute in flight then (runtime_ext/host/execute_registry.h). One is
blamed and counted. Several are not (an innocent model must never be quarantined): the fault is
recorded as ambiguous, naming them all, and each is a suspect for the engines started within the
window: its executes run alone on the device until `SUSPECT_CLEAN_EXECUTES` of them succeed, so
its next fault, if any, is blamed exactly.

A model blamed `quarantine_faults` times within `quarantine_window_s` is not loaded by the
engines started after (its description says why): one bad model must not keep every other one
down. A load or a redeploy of it lifts that (and ends its suspicion).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from service.errors import Busy
from service.prometheus import Counter
from service.shared.engine_events import EngineEvents, GpuFault, Lifted, Restart

log = logging.getLogger(__name__)
# What a client is told to wait: the engine restarts in about two seconds.
RETRY_AFTER_S = 2.0
# The method a load's fault is recorded under.
LOAD = "(load)"
# Clean executes, each alone on the device, that end a suspect's suspicion in one engine.
SUSPECT_CLEAN_EXECUTES = 16


class GpuFaulted(Busy):
    """The engine's GPU context is poisoned; it restarts, so the request may be sent again."""


class GpuFaults:
    def __init__(
        self,
        events: EngineEvents,
        sticky_fault: Callable[[], tuple[str, list[str]] | None],
        owner: Callable[[str], str | None],
        quarantine_faults: int,
        quarantine_window_s: float,
    ):
        """`sticky_fault`: ethost.sticky_fault (the runtime's words and the program paths in
        flight, or None while the context works); `owner`: the model a program path serves."""
        self._events = events
        self._sticky_fault = sticky_fault
        self._owner = owner
        self._limit = quarantine_faults
        self._window_s = quarantine_window_s
        # The fault that poisoned this process's context, once there is one.
        self.fault: GpuFault | None = None
        self._listeners: list[Callable[[GpuFault], None]] = []
        self.faults = Counter(
            "etrt_model_gpu_faults_total",
            "Sticky GPU faults (a poisoned CUDA context: illegal or misaligned address, launch "
            "failure, ECC) blamed on a model (the only one executing, or loading, when the fault "
            "was seen), since the server started; these count toward its quarantine",
            ("model",),
        )
        self.ambiguous = Counter(
            "etrt_model_gpu_faults_ambiguous_total",
            "Sticky GPU faults seen while several models were executing, counted for each of "
            "them: blamed on none (never toward quarantine); each then runs alone on the device "
            "in the next engines until cleared, so its next fault is blamed exactly",
            ("model",),
        )
        self.restarts = Counter(
            "etrt_engine_restarts_total",
            "Engine processes started again by the supervisor since the server started, by reason "
            "(gpu_fault: a sticky GPU fault; crashed: it exited; killed: a signal ended it)",
            ("reason",),
        )
        self._quarantined: dict[str, str] = {}
        self._suspects: set[str] = set()
        self._load(events.read())

    def _load(self, events: list) -> None:
        lifted: dict[str, float] = {}
        recent: dict[str, list[GpuFault]] = {}
        now = time.time()
        for event in events:
            if isinstance(event, Restart):
                self.restarts.add((event.reason,))
            elif isinstance(event, Lifted):
                lifted[event.model] = event.at
            elif isinstance(event, GpuFault):
                self._count(event)
        for event in events:
            if not isinstance(event, GpuFault) or now - event.at > self._window_s:
                continue
            for model in event.models:
                if event.at > lifted.get(model, 0.0):
                    self._suspects.add(model)
            if event.blamed is not None and event.at > lifted.get(event.blamed, 0.0):
                recent.setdefault(event.blamed, []).append(event)
        for model, faults in recent.items():
            if len(faults) >= self._limit:
                self._quarantined[model] = (
                    f"quarantined: it poisoned the GPU context {len(faults)} times in the last "
                    f"{self._window_s:.0f} s (last: {faults[-1].reason}, inputs "
                    f"{faults[-1].inputs}); POST /v2/repository/models/{model}/load or a "
                    "redeploy lifts it"
                )
                log.error("model %s is %s", model, self._quarantined[model])
        if self._suspects:
            log.warning(
                "GPU fault suspects (each execute alone on the device until %d succeed): %s",
                SUSPECT_CLEAN_EXECUTES,
                ", ".join(sorted(self._suspects)),
            )

    def _count(self, fault: GpuFault) -> None:
        if fault.blamed is not None:
            self.faults.add((fault.blamed,))
        else:
            for model in fault.models:
                self.ambiguous.add((model,))

    def suspect(self, model: str) -> bool:
        """Whether `model`'s executes run alone on the device in this engine (a fault within
        the window had it among its candidates)."""
        return model in self._suspects

    def on_fault(self, listener: Callable[[GpuFault], None]) -> None:
        """`listener(fault)` runs once, when this process's context is found poisoned."""
        self._listeners.append(listener)

    def quarantined(self, model: str) -> str | None:
        """Why `model` is not loaded (None: it may be)."""
        return self._quarantined.get(model)

    def lift(self, model: str) -> None:
        """A load or a redeploy of `model`: its earlier faults no longer quarantine it."""
        if self._quarantined.pop(model, None) is not None:
            log.info("model %s: quarantine lifted", model)
        self._suspects.discard(model)
        self._events.append(Lifted(time.time(), model))

    def refusal(self) -> GpuFaulted | None:
        """The answer to every request once the context is poisoned (None while it works)."""
        if self.fault is None:
            return None
        return GpuFaulted(
            f"{self.fault.describe()}; the engine is restarting, retry shortly", RETRY_AFTER_S
        )

    def classify(
        self, model: str, version: str, method: str, inputs: str, failure: BaseException
    ) -> GpuFaulted | None:
        """After `failure` of an execute (or a load: `method` LOAD) of `model`: the GPU fault it
        was (None: the context works, the failure is the request's or the model's own)."""
        if self.fault is not None:
            return self.refusal()
        found = self._sticky_fault()
        if found is None:
            return None
        reason, paths = found
        models = {m for m in map(self._owner, paths) if m is not None}
        if method == LOAD:  # a load runs no execute, but it touches the device too
            models.add(model)
        fault = GpuFault(
            time.time(), tuple(sorted(models)), model, str(version), method, inputs, reason
        )
        self.fault = fault
        self._count(fault)
        log.error("GPU fault: %s (the failure: %s); the engine restarts", fault.describe(), failure)
        self._events.append(fault)
        for listener in self._listeners:
            listener(fault)
        return self.refusal()

    def families(self) -> list:
        return [self.faults, self.ambiguous, self.restarts]
