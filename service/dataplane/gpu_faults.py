"""Sticky GPU faults: which failures poisoned the device context, what follows, and quarantine.

An illegal or misaligned address, a launch failure or an ECC error poisons a CUDA context: the
request that met it fails, and so does every later call in the process, on every model. So after
an execute or a load fails, the engine asks the device whether its context still works
(ethost.device_fault(): DeviceMemory::context_health, the one definition, for executes of the
native lane and of the Python scheduler alike). A failure after which it works is the request's
(answered as before); one after which it does not is a GPU fault: the engine records it
(service/shared/engine_events.py), stops being ready, answers 503 with Retry-After to what it
holds, and exits for the supervisor to start a clean process.

A model that poisoned the context `quarantine_faults` times within `quarantine_window_s` is not
loaded by the engines started after (its description says why): one bad model must not keep
every other one down. A load or a redeploy of it lifts that.
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


class GpuFaulted(Busy):
    """The engine's GPU context is poisoned; it restarts, so the request may be sent again."""


class GpuFaults:
    def __init__(
        self,
        events: EngineEvents,
        device_fault: Callable[[], str | None],
        quarantine_faults: int,
        quarantine_window_s: float,
    ):
        self._events = events
        self._device_fault = device_fault
        self._limit = quarantine_faults
        self._window_s = quarantine_window_s
        # The fault that poisoned this process's context, once there is one.
        self.fault: GpuFault | None = None
        self._listeners: list[Callable[[GpuFault], None]] = []
        self.faults = Counter(
            "etrt_model_gpu_faults_total",
            "Sticky GPU faults (a poisoned CUDA context: illegal or misaligned address, launch "
            "failure, ECC) by the model whose execute or load met them, since the server started",
            ("model",),
        )
        self.restarts = Counter(
            "etrt_engine_restarts_total",
            "Engine processes started again by the supervisor since the server started, by reason "
            "(gpu_fault: a sticky GPU fault; crashed: it exited; killed: a signal ended it)",
            ("reason",),
        )
        self._quarantined: dict[str, str] = {}
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
                self.faults.add((event.model,))
        for event in events:
            if (
                isinstance(event, GpuFault)
                and now - event.at <= self._window_s
                and event.at > lifted.get(event.model, 0.0)
            ):
                recent.setdefault(event.model, []).append(event)
        for model, faults in recent.items():
            if len(faults) >= self._limit:
                self._quarantined[model] = (
                    f"quarantined: it poisoned the GPU context {len(faults)} times in the last "
                    f"{self._window_s:.0f} s (last: {faults[-1].reason}, inputs "
                    f"{faults[-1].inputs}); POST /v2/repository/models/{model}/load or a "
                    "redeploy lifts it"
                )
                log.error("model %s is %s", model, self._quarantined[model])

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
        self._events.append(Lifted(time.time(), model))

    def refusal(self) -> GpuFaulted | None:
        """The answer to every request once the context is poisoned (None while it works)."""
        if self.fault is None:
            return None
        return GpuFaulted(
            f"the GPU context was poisoned by {self.fault.describe()}; the engine is "
            "restarting, retry shortly",
            RETRY_AFTER_S,
        )

    def classify(
        self, model: str, version: str, method: str, inputs: str, failure: BaseException
    ) -> GpuFaulted | None:
        """After `failure` of an execute or a load: the GPU fault it was (None: the context
        works, the failure is the request's or the model's own)."""
        if self.fault is not None:
            return self.refusal()
        reason = self._device_fault()
        if reason is None:
            return None
        fault = GpuFault(time.time(), model, str(version), method, inputs, reason)
        self.fault = fault
        self.faults.add((model,))
        log.error("GPU fault: %s (the failure: %s); the engine restarts", fault.describe(), failure)
        self._events.append(fault)
        for listener in self._listeners:
            listener(fault)
        return self.refusal()

    def families(self) -> list:
        return [self.faults, self.restarts]
