"""The inference path of the dataplane: a request is checked against its version's method,
queued by that method's scheduler, executed, and counted under names that exist.

ModelService inherits this; it shares the service's catalog (which version a request runs on:
service.dataplane.catalog), metrics and statistics.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from service.dataplane.catalog import Served, parse_version
from service.dataplane.deployment import outcome_of
from service.dataplane.kernel_errors import is_input_fault, kernel_reason
from service.dataplane.metrics import UNKNOWN
from service.dataplane.model_pool import PoolClosed
from service.dataplane.scheduler import Scheduler
from service.dataplane.signature import bind_inputs, select_outputs
from service.dataplane.types import InferRequest, InferResponse, Tensor
from service.errors import (
    Busy,
    DeadlineExceeded,
    ExecutionFailed,
    Invalid,
    NotFound,
    ServiceError,
    Unavailable,
    clip,
    input_problem,
)

# The service's logger: operators filter its upload and access lines by this name.
log = logging.getLogger("service.dataplane.service")
# The request parameter naming a priority level, as Triton's clients send it (REST and gRPC).
PRIORITY_PARAMETER = "priority"
_INFER_OUTCOMES = (
    (Unavailable, "unavailable"),
    (Busy, "busy"),
    (DeadlineExceeded, "deadline_exceeded"),
    (NotFound, "client_error"),
    (Invalid, "client_error"),
)


class Inference:
    def _find(self, model: str, version: str | None) -> Served | None:
        """The served version a request runs on; None where there is none (_infer says why)."""
        entry = self._catalog.get(model)
        if entry is None:
            return None
        if not version:
            return entry.default()
        try:
            return entry.served.get(parse_version(model, version))
        except NotFound:
            return None

    def _statistics_version(self, model: str, served: Served | None) -> str | None:
        """The version a request's statistics count under: the one it ran on, else the model's
        default (never a version the client made up: each would be kept)."""
        if served is not None:
            return served.version
        entry = self._catalog.get(model)
        if entry is None or not entry.stored:
            return None
        return str(entry.stored_version(None).version)

    def record_refused(
        self, model: str, method: str, outcome: str, elapsed_s: float, version: str | None = None
    ) -> None:
        """Counts a request a front refused before it crossed (as infer() counts its own)."""
        model_label = model if self._exists(model) else UNKNOWN
        served = self._find(model, version)
        method_label = (
            method if served is not None and method in served.pool.method_names else UNKNOWN
        )
        token = self.metrics.request_started(model_label)
        self.metrics.request_finished(token, model_label, method_label, outcome, None, elapsed_s)
        counted = self._statistics_version(model, served)
        if model_label != UNKNOWN and counted is not None:
            self.statistics.record_request(model, counted, False, int(elapsed_s * 1e9))
        self._log_infer(model, method, outcome, elapsed_s)

    def _scheduler_for(self, served: Served, method: str) -> Scheduler:
        scheduler = served.schedulers.get(method)
        if scheduler is None:
            scheduler = served.schedulers[method] = Scheduler(
                served.stored.name,
                method,
                served.pool,
                served.stored.description.config or {},
                self._executor,
                self.metrics,
                self.statistics,
                served.version,
            )
        return scheduler

    async def infer(self, request: InferRequest) -> InferResponse:
        """Runs one request, then counts and logs it under names that exist (else UNKNOWN)."""
        begun = time.perf_counter()
        model, method = request.model, request.method
        served = self._find(model, request.version)
        model_label = model if self._exists(model) else UNKNOWN
        method_label = (
            method if served is not None and method in served.pool.method_names else UNKNOWN
        )
        token = self.metrics.request_started(model_label)
        queued: list[float] = []
        phases: dict[str, int] = {}
        outcome = "error"
        try:
            response = await self._infer(served, request, queued.append, phases)
            outcome = "ok"
            return response
        except ServiceError as exc:
            outcome = outcome_of(exc, _INFER_OUTCOMES)
            raise
        except asyncio.CancelledError:  # the client went away
            outcome = "cancelled"
            raise
        finally:
            elapsed = time.perf_counter() - begun
            self.metrics.request_finished(
                token, model_label, method_label, outcome, queued[0] if queued else None, elapsed
            )
            counted = self._statistics_version(model, served)
            if model_label != UNKNOWN and counted is not None:
                self.statistics.record_request(
                    model,
                    counted,
                    outcome == "ok",
                    int(elapsed * 1e9),
                    int(queued[0] * 1e9) if queued else None,
                    phases.get("input"),
                    phases.get("infer"),
                    phases.get("output"),
                )
            self._log_infer(model, method, outcome, elapsed)

    def _log_infer(self, model: str, method: str, outcome: str, elapsed_s: float) -> None:
        if self.settings.access_log:
            log.info(
                "infer model=%r method=%r outcome=%s duration_s=%.6f",
                clip(model),
                clip(method),
                outcome,
                elapsed_s,
            )

    async def _infer(
        self,
        served: Served | None,
        request: InferRequest,
        acquired: Callable[[float], None],
        phases: dict[str, int],
    ) -> InferResponse:
        """`phases` receives the nanoseconds spent checking inputs, executing (after the wait for
        an instance) and collecting outputs, for the statistics extension."""
        model, method = request.model, request.method
        if served is None:
            if model in self._refused:
                raise Unavailable(self._refused[model].message)
            entry = self._catalog.get(model)
            if entry is None:
                raise NotFound(f"model {clip(model)!r} not found")
            entry.served_version(parse_version(model, request.version))  # raises why
        if method not in served.pool.method_names:
            raise NotFound(
                f"model {model!r} has no method {clip(method)!r} (methods: "
                f"{', '.join(served.pool.method_names)})"
            )
        signature = served.signatures[method]
        mark = time.perf_counter_ns()
        if request.checked_at == self.generation:  # a front checked them against this signature
            arrays = [tensor.array for tensor in request.inputs]
        else:
            arrays = bind_inputs(request.inputs, signature)
        selected = select_outputs(signature, request.outputs)
        phases["input"] = time.perf_counter_ns() - mark

        def started(waited: float) -> None:
            nonlocal mark
            mark = time.perf_counter_ns()
            acquired(waited)

        try:
            results = await self._scheduler_for(served, method).submit(
                arrays, request.timeout_s, started, request.parameters.get(PRIORITY_PARAMETER)
            )
        except PoolClosed:
            raise Unavailable(f"model {model!r} is being deleted or replaced") from None
        except ValueError as exc:  # ethost.InputError: the host's own input validation
            label = getattr(exc, "input_name", None) or f"input {getattr(exc, 'index', '?')}"
            raise input_problem(label, "input.invalid", str(exc)) from None
        except RuntimeError as exc:
            if is_input_fault(exc):
                reason = kernel_reason(exc)
                # One line per refused input: the host captures ExecuTorch's own lines instead
                # of printing them, so this is the only trace of it in the log.
                log.warning(
                    "infer model=%r method=%r outcome=input_rejected: %s", model, method, reason
                )
                raise input_problem(
                    None,
                    "input.rejected",
                    (
                        f"model {model!r} method {method!r} rejected the inputs while executing: "
                        f"{reason}"
                    ),
                ) from None
            raise ExecutionFailed(
                f"executing {model!r} method {method!r} failed: {kernel_reason(exc)}"
            ) from None
        phases["infer"] = time.perf_counter_ns() - mark
        mark = time.perf_counter_ns()
        outputs = []
        for index in selected:
            spec = signature.outputs[index]
            outputs.append(Tensor(spec.name, spec.datatype, results[index]))
        phases["output"] = time.perf_counter_ns() - mark
        return InferResponse(model, served.version, method, request.id, outputs)
