"""The inference path of the dataplane: a request is checked against its version's method,
queued by that method's scheduler, executed, and counted under names that exist.

ModelService inherits this; it shares the service's catalog (which version a request runs on:
service.dataplane.catalog), metrics and statistics.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from service import oip
from service.dataplane.catalog import Served, parse_version
from service.dataplane.deployment import outcome_of
from service.dataplane.gpu_faults import GpuFaulted
from service.dataplane.kernel_errors import execution_error, inputs_sent, is_input_fault
from service.dataplane.metrics import UNKNOWN
from service.dataplane.model_pool import PoolClosed
from service.dataplane.scheduler import Policy, policy_for
from service.dataplane.scheduling.batching import BatchingPolicy
from service.dataplane.scheduling.direct import DirectPolicy
from service.dataplane.scheduling.gate import Refusal
from service.dataplane.signature import bind_inputs, select_outputs
from service.dataplane.types import InferRequest, InferResponse, MethodSignature, Tensor
from service.errors import (
    Busy,
    DeadlineExceeded,
    Invalid,
    NotFound,
    ServiceError,
    Unavailable,
    clip,
)

# The service's logger: operators filter its upload and access lines by this name.
log = logging.getLogger("service.dataplane.service")
_INFER_OUTCOMES = (
    (Unavailable, "unavailable"),
    (GpuFaulted, "unavailable"),
    (Busy, "busy"),
    (DeadlineExceeded, "deadline_exceeded"),
    (NotFound, "client_error"),
    (Invalid, "client_error"),
)
# Routes infer_now keeps at most; a generation's worth is one per model method used.
_ROUTES_KEPT = 1024


@dataclass(slots=True)
class _Route:
    """What infer_now needs of one model method; the service drops them all at every change to
    what is served (so none keeps a deleted model's pool alive)."""

    version: str
    signature: MethodSignature
    scheduler: Policy
    outputs: list[tuple[int, str, str]]  # (index, name, datatype) of every output
    most_bytes: list  # per output, the most bytes it can take (inf: unknown)


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
        """Counts a request that never ran: one a front refused before it crossed, or a lane
        request the engine's lane dropped because its client went away (outcome "cancelled"),
        as infer() counts its own."""
        self._finished(None, model, version, method, outcome, None, elapsed_s, {})

    def refuses(self, model: str, version: str | None, protocol: str) -> Refusal | None:
        """The refusal for a request to `model` whose method is in a body not read yet, when
        every method's queue is full now (so a protocol answers before reading the body); the
        refusal is counted as the default method's. `protocol`: what a front's gate shares
        places by (service/dataplane/scheduling/gate.py); here the queue itself decides."""
        served = self._find(model, version)
        if served is None:
            return None
        refusal = None
        for method in served.signatures:
            scheduler = served.schedulers.get(method)
            refusal = None if scheduler is None else scheduler.refusal()
            if refusal is None:
                return None
        if refusal is None:
            return None
        self.record_refused(model, oip.DEFAULT_METHOD, "busy", 0.0, version)
        return Refusal(refusal.message, refusal.retry_after_s)

    def _scheduler_for(self, served: Served, method: str) -> Policy:
        scheduler = served.schedulers.get(method)
        if scheduler is None:
            config = served.stored.description.effective_config
            scheduler = served.schedulers[method] = policy_for(config)(
                served.stored.name,
                method,
                served.pool,
                config,
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
        except asyncio.CancelledError:  # the client went away, or its deadline passed
            outcome = request.cancelled_as
            raise
        finally:
            elapsed_s = time.perf_counter() - begun
            queued_s = queued[0] if queued else None
            self._finished(
                token, model, request.version, method, outcome, queued_s, elapsed_s, phases,
                model_label,
            )  # fmt: skip

    def infer_now(
        self, model: str, version: str | None, method: str, arrays: list, requested, room=None
    ) -> tuple[str, list[tuple]] | None:
        """infer() without a task or a wait, for inputs a front checked against this generation's
        signature, when the request can run at once and inline: its model method is scheduled
        directly (no queue), an instance is free and its recent executes are short. Answers
        (version, [(name, datatype, array) per output asked for]); None: nothing was done, serve
        it with infer(). `requested`: the output names asked for, None for all. `room`: where
        the outputs may be written (InferRequest.output_room, or the request's RequestShm when
        its tensors are in client regions: anything with destinations()).

        For a small program the coroutines, task and semaphore of infer() cost several times
        the execute itself, and the engine's one thread serves every front: this is what
        bounds the server's throughput on a many-core host, so what a request's model method
        needs is looked up once per generation (_Route), not per request."""
        route = self._routes.get((model, version, method))
        if route is None:
            route = self._route(model, version, method)
            if route is None:
                return None
        scheduler = route.scheduler
        if not scheduler.can_run_now():
            return None
        begun = time.perf_counter_ns()
        try:
            outputs = route.outputs
            if requested is not None:
                outputs = [outputs[i] for i in select_outputs(route.signature, requested)]
            into = None
            if room is not None and type(scheduler) is DirectPolicy:
                names = [None] * len(route.outputs)
                for index, name, _ in outputs:
                    names[index] = name
                into = room.destinations(names, route.most_bytes)
            bound = time.perf_counter_ns()
            try:
                ran = scheduler.run_now(arrays, into)
            except (ValueError, RuntimeError) as exc:
                raise self._execute_error(
                    exc, model, route.version, method, route.signature, [a.shape for a in arrays]
                ) from None
            if ran is None:  # the gate had none free: nothing ran
                return None
            results, rows, infer_ns = ran
            executed = time.perf_counter_ns()
            answer = [(name, datatype, results[index]) for index, name, datatype in outputs]
        except ServiceError as exc:
            elapsed_s = (time.perf_counter_ns() - begun) / 1e9
            outcome = outcome_of(exc, _INFER_OUTCOMES)
            self._finished(None, model, version, method, outcome, 0.0, elapsed_s, {})
            raise
        done = time.perf_counter_ns()
        self.ledger.add(
            model,
            route.version,
            method,
            rows,
            done - begun,
            bound - begun,
            infer_ns,
            done - executed,
        )
        if self.settings.access_log:
            self._log(model, method, "ok", (done - begun) / 1e9)
        return route.version, answer

    def execute_failed(
        self, model: str, version: str, method: str, failure: Exception, shapes: list
    ) -> ServiceError:
        """The error for a request whose execute the engine's native lane ran and saw fail
        (`failure`: as Method.execute raises it), counted as infer() counts its failures: the
        answer is made here, where Python's own executes' failures are, and the request is not
        run again (a program may keep state across executes)."""
        served = self._find(model, version)
        signature = None if served is None else served.signatures.get(method)
        error = self._execute_error(failure, model, version, method, signature, shapes)
        outcome = outcome_of(error, _INFER_OUTCOMES)
        self._finished(None, model, version, method, outcome, 0.0, 0.0, {})
        return error

    def lane_routes(self) -> list[tuple]:
        """The served methods the engine's native lane may serve (runtime_ext/lane/), as
        (route id, model, version, method, the method's LaneGate, max_batch, signature, whether
        its longer executes may run on the lane's workers, and for a method that merges its
        requests (queue delay in ns, preferred batch sizes), else None): those infer_now may
        run at once, or the lane's batcher merge, with no access log to write. Longer executes
        hold an instance for a while, which this side's queue does not see: only a method whose
        queue has no bound or deadline to keep runs them on the lane."""
        return [
            (
                route,
                name,
                served.version,
                method,
                served.pool.gate(method),
                served.max_batch,
                served.signatures[method],
                _unbounded(served.stored.description.effective_config.queue),
                _batching(served.stored.description.effective_config),
            )
            for name, entry in self._catalog.items()
            for served in entry.served.values()
            for method, route in self._lane_methods(served).items()
        ]

    def _lane_methods(self, served: Served) -> dict[str, int]:
        """method -> lane route id of a served version's methods the lane may serve."""
        settings = self.settings
        config = served.stored.description.effective_config
        if settings.access_log or self.gpu_faults.fault is not None:
            return {}
        policy = policy_for(config)
        # A batching queue with a bound or deadline stays Python's (it refuses and expires
        # there); an unbounded one merges the lane's requests in the lane (batcher.h).
        if policy is DirectPolicy or (policy is BatchingPolicy and _unbounded(config.queue)):
            return dict(served.routes)
        return {}

    def _execute_error(
        self,
        exc: Exception,
        model: str,
        version: str,
        method: str,
        signature: MethodSignature | None,
        shapes: list,
    ) -> ServiceError:
        """A failed execute's error, on every path that executes (this scheduler's, infer_now's
        and the native lane's): a GPU fault when the device context no longer works after it
        (service/dataplane/gpu_faults.py), else what the failure itself means."""
        if not isinstance(exc, ValueError) and not is_input_fault(exc):
            sent = inputs_sent(signature, shapes)
            faulted = self.gpu_faults.classify(model, version, method, f"[{sent}]", exc)
            if faulted is not None:
                return faulted
        return execution_error(exc, model, method, signature, shapes)

    def _route(self, model: str, version: str | None, method: str) -> _Route | None:
        if self.gpu_faults.fault is not None:  # infer() answers why
            return None
        served = self._find(model, version)
        signature = None if served is None else served.signatures.get(method)
        if signature is None:
            return None
        if len(self._routes) >= _ROUTES_KEPT:  # version spellings ("1", "01", ...) add up
            self._routes.clear()
        route = self._routes[(model, version, method)] = _Route(
            served.version,
            signature,
            self._scheduler_for(served, method),
            [(i, spec.name, spec.datatype) for i, spec in enumerate(signature.outputs)],
            _most_bytes(served, method),
        )
        return route

    def _finished(
        self, token, model, version, method, outcome, queued_s, elapsed_s, phases, model_label=None
    ) -> None:
        """Counts one request once, in the metrics and the statistics, under names that exist
        (else UNKNOWN, and in the metrics only; statistics under the version it ran on, else
        the model's default), and logs it under the names it gave. `model_label`: the one its
        request_started token was taken under."""
        served = self._find(model, version)
        if model_label is None:
            model_label = model if served is not None or self._exists(model) else UNKNOWN
        method_label = method if served is not None and method in served.signatures else UNKNOWN
        self.metrics.request_finished(
            token, model_label, method_label, outcome, queued_s, elapsed_s
        )
        counted = self._statistics_version(model, served)
        if model_label != UNKNOWN and counted is not None:
            self.statistics.record_request(
                model,
                counted,
                outcome == "ok",
                int(elapsed_s * 1e9),
                None if queued_s is None else int(queued_s * 1e9),
                phases.get("input"),
                phases.get("infer"),
                phases.get("output"),
            )
        if self.settings.access_log:
            self._log(model, method, outcome, elapsed_s)

    @staticmethod
    def _log(model: str, method: str, outcome: str, elapsed_s: float) -> None:
        log.info(
            "infer model=%r method=%r outcome=%s duration_s=%.6f",
            clip(model),
            clip(method),
            outcome,
            elapsed_s,
        )

    def _bind(self, request: InferRequest, signature: MethodSignature) -> tuple[list, list]:
        """The input arrays in the method's order, and the indices of the outputs asked for."""
        if request.checked_at == self.generation:  # a front checked them against this signature
            arrays = [tensor.array for tensor in request.inputs]
        else:
            arrays = bind_inputs(request.inputs, signature)
        return arrays, select_outputs(signature, request.outputs)

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
        poisoned = self.gpu_faults.refusal()
        if poisoned is not None:
            raise poisoned
        if served is None:
            if model in self._refused:
                raise Unavailable(self._refused[model].message)
            entry = self._catalog.get(model)
            if entry is None:
                raise NotFound(f"model {clip(model)!r} not found")
            entry.served_version(parse_version(model, request.version))  # raises why
        signature = served.signatures.get(method)
        if signature is None:
            raise NotFound(
                f"model {model!r} has no method {clip(method)!r} (methods: "
                f"{', '.join(served.pool.method_names)})"
            )
        mark = time.perf_counter_ns()
        arrays, selected = self._bind(request, signature)
        phases["input"] = time.perf_counter_ns() - mark

        def started(waited: float) -> None:
            nonlocal mark
            mark = time.perf_counter_ns()
            acquired(waited)

        scheduler = self._scheduler_for(served, method)
        # Outputs written where the request says, by the host (direct only: batching and
        # priority queues merge or reorder requests, and copy them as before).
        destinations = _destinations(request, served, signature, selected, scheduler)
        extra = {"outputs": destinations} if destinations is not None else {}
        try:
            results = await scheduler.submit(
                arrays,
                request.timeout_s,
                started,
                request.parameters.get(oip.PRIORITY_PARAMETER),
                **extra,
            )
        except PoolClosed:
            raise Unavailable(f"model {model!r} is being deleted or replaced") from None
        except (ValueError, RuntimeError) as exc:
            raise self._execute_error(
                exc, model, served.version, method, signature, [a.shape for a in arrays]
            ) from None
        phases["infer"] = time.perf_counter_ns() - mark
        mark = time.perf_counter_ns()
        response = _response(request, served.version, signature, selected, results)
        phases["output"] = time.perf_counter_ns() - mark
        return response


def _response(
    request: InferRequest, version: str, signature: MethodSignature, selected, results
) -> InferResponse:
    outputs = []
    for index in selected:
        spec = signature.outputs[index]
        outputs.append(Tensor(spec.name, spec.datatype, results[index]))
    return InferResponse(request.model, version, request.method, request.id, outputs)


def _destinations(request: InferRequest, served, signature, selected, scheduler):
    """Per output, the memory to execute it into, or None: the CUDA shared memory of the
    request's regions (RequestShm.destinations), else its output room (the engine's, in the
    front's arena). ModelPool.run answers a cancelled request only once they are written."""
    into = request.shared_memory if request.shared_memory is not None else request.output_room
    if into is None or type(scheduler) is not DirectPolicy:
        return None
    names = [None] * len(signature.outputs)
    for index in selected:
        names[index] = signature.outputs[index].name
    return into.destinations(names, _most_bytes(served, request.method))


def _batching(config) -> tuple[int, list[int]] | None:
    """What the lane's batcher (runtime_ext/lane/batcher.h) needs of a merging method's policy,
    the one BatchingPolicy reads too."""
    if policy_for(config) is not BatchingPolicy:
        return None
    return int(config.queue.delay_s * 1e9), list(config.queue.preferred_batch_size)


def _unbounded(queue) -> bool:
    policy = queue.default_queue_policy
    return not policy.max_queue_size and policy.timeout_s is None


def _most_bytes(served: Served, method: str) -> list:
    """Per output of the method, the most bytes it can take (its upper bounds), else inf."""
    return [spec.get("nbytes", math.inf) for spec in served.pool.meta(method)["outputs"]]
