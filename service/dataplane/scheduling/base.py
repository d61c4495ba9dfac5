"""What every scheduling policy shares: the queue bound and its refusal, the batch-rows check, and
the counting of executes and of how fast the queue drains.

A refusal must tell a client when to come back: too early and the flood continues, too late and
the instances idle. The queue's measured drain time answers that: the seconds between request
completions while requests were waiting (so the queue, not idleness, set the pace), times the
requests ahead. Until completions under load have been seen, the recent execute time stands in.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from concurrent.futures import Executor

import numpy as np

from service.dataplane.metrics import Metrics
from service.dataplane.model_pool import ModelPool
from service.dataplane.statistics import Statistics
from service.errors import Busy, DeadlineExceeded, QueueFull, input_problem
from service.model_config.records import ModelConfig, QueuePolicy

_SMOOTHING = 0.2  # weight of the newest completion interval in the drain-rate average


class Policy:
    """One model method's scheduling. Lives as long as the model's pool; made on first use."""

    def __init__(
        self,
        model: str,
        method: str,
        pool: ModelPool,
        config: ModelConfig,
        executor: Executor,
        metrics: Metrics,
        statistics: Statistics,
        version: str,
    ):
        self.model, self.method, self.pool = model, method, pool
        self.config = config
        self.max_batch = config.max_batch
        self.policy = config.queue.default_queue_policy
        self._executor = executor
        self._metrics = metrics
        # Executes are counted here, where they happen: a request does not know how many
        # others shared its execute.
        self._statistics = statistics
        self.version = version
        self._instances = pool.instance_count(method)
        # Only a bounded queue refuses, so only then is its drain time needed.
        queue = config.queue
        self._bounded = any(
            queue.policy_of(level).max_queue_size for level in range(queue.priority_levels + 1)
        )
        self._recent_execute_s = 0.0
        self._per_request_s: float | None = None  # between completions, measured under load
        self._last_done_ns = 0
        self._was_waiting = False
        # Weakly: the gauge must not keep a replaced model's pool (and its native instances)
        # alive until the new model's first request registers its own queue.
        alive = weakref.ref(self)
        metrics.watch_queue(model, method, lambda: alive().depth if alive() else 0, version)

    @property
    def depth(self) -> int:
        """Requests waiting: queued for a batch, or for a free instance."""
        raise NotImplementedError

    async def submit(
        self,
        arrays: list[np.ndarray],
        timeout_s: float | None = None,
        acquired: Callable[[float], None] | None = None,
        priority=None,
    ) -> list[np.ndarray]:
        """The method's outputs for these inputs. `timeout_s` (the request's own, else the
        configured default) bounds the time spent queued, not the execute; `acquired(seconds
        waited)` is called when the request leaves the queue; `priority` is the request's
        parameter of that name (a level where the model has levels)."""
        raise NotImplementedError

    def can_run_now(self) -> bool:
        """Whether a request would execute at once and inline, so that the engine may serve it
        without a task (ModelService.infer_now); only a policy without a queue of its own says
        yes (DirectPolicy)."""
        return False

    # -- admission -------------------------------------------------------------------------------

    def _level(self, priority) -> int:
        """The request's priority level; 0: the model has none (as in Triton, the parameter is
        then ignored)."""
        return 0

    def _policy(self, level: int) -> QueuePolicy:
        return self.policy

    def _waiting(self, level: int) -> int:
        """Requests queued at this priority level (all of them without levels)."""
        return self.depth

    def _admit(self, priority) -> tuple[int, QueuePolicy]:
        """The request's level and queue policy, or Busy when that queue is full."""
        level = self._level(priority)
        policy = self._policy(level)
        if policy.max_queue_size and self._waiting(level) >= policy.max_queue_size:
            raise self._busy(level, policy)
        return level, policy

    def refusal(self) -> Busy | None:
        """What a request would be refused with now, its queue being full; None where it would
        be queued (or where priority levels, which only the request names, decide)."""
        bound = self.policy.max_queue_size
        if not bound or self.config.queue.priority_levels or self.depth < bound:
            return None
        return self._busy(0, self.policy)

    def drain_s(self) -> float:
        """Seconds until the requests waiting now have left the queue, at its measured pace."""
        depth = self.depth
        if self._per_request_s is not None:
            return depth * self._per_request_s
        per_batch = max(self.max_batch, 1)
        return self._recent_execute_s * math.ceil(depth / per_batch / self._instances)

    def pace_s(self) -> float:
        """Seconds between requests leaving the queue, at its measured pace."""
        if self._per_request_s is not None:
            return self._per_request_s
        return self._recent_execute_s / max(self.max_batch, 1) / self._instances

    def _busy(self, level: int, policy: QueuePolicy) -> Busy:
        at = f" at priority level {level}" if level else ""
        message = (
            f"model {self.model!r} method {self.method!r} has {self._waiting(level)} requests "
            f"queued{at} (max_queue_size {policy.max_queue_size}); retry later"
        )
        drain_s = self.drain_s()
        if self.config.queue.priority_levels:
            # A full level refuses only its own requests, which a front cannot tell apart.
            return Busy(message, max(1.0, drain_s))
        return QueueFull(message, self.model, self.version, self.method, self.pace_s(), drain_s)

    def _expired(self, timeout_s: float) -> DeadlineExceeded:
        return DeadlineExceeded(
            f"model {self.model!r} method {self.method!r}: the request "
            f"waited {timeout_s:g} s in the queue and was not executed"
        )

    def _rows(self, arrays: list[np.ndarray]) -> int:
        """Rows of a request to a model with a batch dimension: the same on every input."""
        leading = {a.shape[0] if a.ndim else 0 for a in arrays}
        rows = leading.pop() if len(leading) == 1 else 0
        if not 1 <= rows <= self.max_batch:
            shapes = ", ".join(str(list(a.shape)) for a in arrays)
            raise input_problem(
                None,
                "input.batch",
                (
                    f"model {self.model!r} batches along dim 0: every input needs the same number "
                    f"of rows, 1 to max_batch_size {self.max_batch}; the request sends {shapes}"
                ),
            )
        return rows

    # -- counting --------------------------------------------------------------------------------

    def _record(
        self, rows: int, input_ns: int, infer_ns: int, output_ns: int, requests: int, now_ns: int
    ) -> None:
        """One successful execute of `rows` rows (Triton's batch size: the requests' rows
        together where the model batches, else 1 per request) for `requests` requests, ended
        at `now_ns` (perf_counter_ns)."""
        self._statistics.record_execution(
            self.model, self.version, rows, input_ns, infer_ns, output_ns
        )
        self._recent_execute_s = infer_ns / 1e9
        self._metrics.batch_executed(self.model, self.method, rows)
        self._completed(requests, now_ns)

    def _completed(self, requests: int, now_ns: int) -> None:
        """Measures the queue's pace at a completion of `requests` requests."""
        if not self._bounded:
            return
        # Only an interval with requests waiting at both ends measures the queue's pace; one
        # that began idle would count the idleness as drain time.
        waiting = self.depth > 0
        if waiting and self._was_waiting:
            took = (now_ns - self._last_done_ns) / 1e9 / requests
            previous = self._per_request_s
            self._per_request_s = (
                took if previous is None else previous + _SMOOTHING * (took - previous)
            )
        self._was_waiting = waiting
        self._last_done_ns = now_ns
