"""Per model+method request scheduling: dynamic batching, bounded queues, deadlines.

On a GPU one execute of 32 rows costs about what one of a single row costs when the weights, not
the arithmetic, bound the time; merging concurrent requests is then the main lever for
throughput. A request queues here, waits at most the configured delay for company, and runs
with compatible requests (same dtypes and same dims past dim 0) as one execute; each gets back
exactly its own rows of every output.

Overload must turn into a quick, honest "busy" rather than timeouts for everyone, so a full queue
refuses at once (Busy, with a retry hint from the recent execute time), and a request whose
deadline passes while queued is dropped unexecuted (DeadlineExceeded). A request whose awaiting
task is cancelled (its client went away) leaves the queue before it can be executed.

With priority levels (dynamic_batching.priority_levels) the queue is taken highest level first,
arrival order within a level; each level has its own bound and deadline, so a full low level
never refuses a high one, and a request past a DELAY deadline goes behind all the others instead
of being refused. A model with levels but no batching queues here too, one request per execute.

Models without dynamic batching or levels keep one execute per request on N instances
(ModelPool), with the same queue bound and deadline.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass

import numpy as np

from service.dataplane.kernel_errors import is_input_fault, kernel_reason
from service.dataplane.metrics import Metrics
from service.dataplane.model_pool import ModelPool, PoolClosed
from service.dataplane.statistics import Statistics
from service.errors import Busy, DeadlineExceeded, ExecutionFailed, clip, input_problem, invalid


@dataclass(eq=False)
class _Queued:
    arrays: list[np.ndarray]
    rows: int
    key: tuple  # dtypes and dims past dim 0: only equal keys are merged
    future: asyncio.Future
    enqueued: float
    acquired: Callable[[float], None] | None
    level: int = 0  # priority level: lower is taken first (0: the model has no levels)
    delayed: bool = False  # timed out under timeout_action DELAY: behind every other request
    timer: asyncio.TimerHandle | None = None


@dataclass(frozen=True)
class _Policy:
    """A queue policy: of the model, or of one priority level."""

    max_queue: int
    timeout_s: float | None
    delay: bool = False  # past the timeout: DELAY (move behind) instead of REJECT

    @classmethod
    def of(cls, policy: dict) -> _Policy:
        return cls(
            policy.get("max_queue_size", 0),
            policy.get("default_timeout_microseconds", 0) / 1e6 or None,
            policy.get("timeout_action", "REJECT") == "DELAY",
        )


class Scheduler:
    """One model method's queue. Lives as long as the model's pool; created on first use."""

    def __init__(
        self,
        model: str,
        method: str,
        pool: ModelPool,
        config: dict,
        executor: Executor,
        metrics: Metrics,
        statistics: Statistics,
        version: str,
    ):
        self.model, self.method, self.pool = model, method, pool
        self._executor = executor
        self._metrics = metrics
        # Executes are counted here, where they happen: a request does not know how many
        # others shared its execute.
        self._statistics = statistics
        self.version = version
        batching = config.get("dynamic_batching") or {}
        self.max_batch = config.get("max_batch_size", 0)
        self.batching = "dynamic_batching" in config and self.max_batch > 0
        self.policy = _Policy.of(batching.get("default_queue_policy", {}))
        # Priority levels 1..N, each with its own policy (the default one where none is set).
        self.levels = batching.get("priority_levels", 0)
        self.default_level = batching.get("default_priority_level", 0)
        per_level = batching.get("priority_queue_policy", {})
        self._policies = {
            level: _Policy.of(per_level[str(level)]) if str(level) in per_level else self.policy
            for level in range(1, self.levels + 1)
        }
        # Requests wait in this scheduler's queue (rather than for an instance of the pool)
        # when they may be merged or must be taken in priority order.
        self.queued = self.batching or self.levels > 0
        self.delay_s = batching.get("max_queue_delay_microseconds", 0) / 1e6
        self.preferred = set((batching or {}).get("preferred_batch_size", []))
        self._queue: list[_Queued] = []
        self._arrived = asyncio.Event()
        self._free = asyncio.Semaphore(pool.instance_count(method))
        self._dispatcher: asyncio.Task | None = None
        self._running: set[asyncio.Task] = set()
        self._recent_execute_s = 0.0
        # Weakly: the gauge must not keep a replaced model's pool (and its native instances)
        # alive until the new model's first request registers its own queue.
        alive = weakref.ref(self)
        metrics.watch_queue(model, method, lambda: alive().depth if alive() else 0, version)

    @property
    def depth(self) -> int:
        """Requests waiting: queued for a batch, or for a free instance."""
        return len(self._queue) if self.queued else self.pool.waiting(self.method)

    def _waiting(self, level: int) -> int:
        """Requests queued at this priority level (all of them without levels)."""
        if not self.levels:
            return self.depth
        return sum(1 for item in self._queue if item.level == level)

    def _busy(self, level: int, policy: _Policy) -> Busy:
        instances = self.pool.instance_count(self.method)
        per_batch = max(self.max_batch, 1) if self.batching else 1
        drain_s = self._recent_execute_s * math.ceil(self.depth / per_batch / instances)
        at = f" at priority level {level}" if self.levels else ""
        return Busy(
            f"model {self.model!r} method {self.method!r} has {self._waiting(level)} requests "
            f"queued{at} (max_queue_size {policy.max_queue}); retry later",
            retry_after_s=max(1.0, drain_s),
        )

    def _level(self, priority) -> int:
        """The request's level: its `priority` parameter, 0 or absent for the default one."""
        if not self.levels:
            return 0  # as in Triton, a model without levels ignores the parameter
        if priority is None or priority == 0:
            return self.default_level
        if isinstance(priority, bool) or not isinstance(priority, int) or priority < 0:
            raise invalid(
                "request.priority",
                f"parameter 'priority' must be an integer, 0 to {self.levels}, not "
                f"{clip(priority)!r}",
            )
        if priority > self.levels:
            raise invalid(
                "request.priority",
                f"model {self.model!r} has priority levels 1 to {self.levels}; "
                f"the request asks for {priority}",
            )
        return priority

    def _expired(self, timeout_s: float) -> DeadlineExceeded:
        return DeadlineExceeded(
            f"model {self.model!r} method {self.method!r}: the request "
            f"waited {timeout_s:g} s in the queue and was not executed"
        )

    async def submit(
        self,
        arrays: list[np.ndarray],
        timeout_s: float | None = None,
        acquired: Callable[[float], None] | None = None,
        priority=None,
    ) -> list[np.ndarray]:
        """The method's outputs for these inputs. `timeout_s` (the request's own, else the
        configured default) bounds the time spent queued, not the execute; `priority` is the
        request's parameter of that name (a level 1..priority_levels, 0: the default)."""
        level = self._level(priority)
        policy = self._policies[level] if self.levels else self.policy
        if policy.max_queue and self._waiting(level) >= policy.max_queue:
            raise self._busy(level, policy)
        timeout_s = timeout_s if timeout_s is not None else policy.timeout_s
        if self.queued:
            return await self._enqueue(arrays, timeout_s, acquired, level, policy.delay)
        # Batches the client made itself are bounded too, and counted by their rows.
        rows = self._rows(arrays) if self.max_batch else 1
        started = []

        def on_instance(waited_s: float) -> None:
            started.append(time.perf_counter_ns())
            if acquired is not None:
                acquired(waited_s)

        try:
            outputs = await self.pool.run(
                self.method, arrays, self._executor, on_instance, timeout_s
            )
        except TimeoutError:
            raise self._expired(timeout_s) from None
        self._record(rows, 0, time.perf_counter_ns() - started[0], 0)
        return outputs

    def can_run_now(self) -> bool:
        """Whether a request would execute at once and inline (see ModelPool.run_now): the
        method is scheduled directly, not queued, and nothing waits before it."""
        return not self.queued and self.pool.can_run_now(self.method)

    def run_now(self, arrays: list[np.ndarray]) -> tuple[list[np.ndarray], int, int]:
        """submit() without a wait, only right after can_run_now said so: (outputs, rows,
        nanoseconds executing). The caller counts the execute with its request, in one go
        (Statistics.record_served, Metrics.record_served)."""
        rows = self._rows(arrays) if self.max_batch else 1
        begun = time.perf_counter_ns()
        outputs = self.pool.run_now(self.method, arrays)
        infer_ns = time.perf_counter_ns() - begun
        self._recent_execute_s = infer_ns / 1e9
        return outputs, rows, infer_ns

    def _record(self, rows: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        """One successful execute of `rows` rows (Triton's batch size: the requests' rows
        together where the model batches, else 1 per request)."""
        self._statistics.record_execution(
            self.model, self.version, rows, input_ns, infer_ns, output_ns
        )
        self._recent_execute_s = infer_ns / 1e9
        self._metrics.batch_executed(self.model, self.method, rows)

    # -- batching -------------------------------------------------------------------------------

    def _rows(self, arrays: list[np.ndarray]) -> int:
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

    async def _enqueue(self, arrays, timeout_s, acquired, level, delay) -> list[np.ndarray]:
        # Without batching a request is an execute of its own: one row, never merged.
        rows = self._rows(arrays) if self.batching else 1
        loop = asyncio.get_running_loop()
        self.pool.admit()
        key = tuple((a.dtype.str, a.shape[1:]) for a in arrays)
        item = _Queued(arrays, rows, key, loop.create_future(), loop.time(), acquired, level)
        if timeout_s is not None:
            item.timer = loop.call_later(timeout_s, self._expire, item, timeout_s, delay)
        self._queue.append(item)
        self._arrived.set()
        if self._dispatcher is None or self._dispatcher.done():
            self._dispatcher = loop.create_task(self._dispatch())
        try:
            return await item.future
        except asyncio.CancelledError:
            self._drop(item)
            raise

    def _drop(self, item: _Queued) -> bool:
        """Takes a request out of the queue unexecuted; False once it is in a batch."""
        if item not in self._queue:
            return False
        self._queue.remove(item)
        if item.timer is not None:
            item.timer.cancel()
        self.pool.withdraw()
        self._arrived.set()  # the batch being gathered may have changed
        return True

    def _expire(self, item: _Queued, timeout_s: float, delay: bool) -> None:
        if delay:
            item.delayed = True
            self._arrived.set()  # the order changed
            return
        if self._drop(item) and not item.future.done():
            item.future.set_exception(self._expired(timeout_s))

    async def _dispatch(self) -> None:
        """Forms batches while requests wait, at most one per instance at a time."""
        while self._queue:
            await self._free.acquire()
            batch = await self._gather()
            if not batch:
                self._free.release()
                continue
            task = asyncio.get_running_loop().create_task(self._execute(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    def _candidates(self) -> tuple[list[_Queued], bool]:
        """The first request (the oldest of the highest priority level, timed-out DELAY ones
        last) and the compatible ones after it that fit, in that order; and whether the batch
        is full (the next compatible one would not fit)."""
        order = sorted(self._queue, key=lambda item: (item.delayed, item.level))  # stable
        head = order[0]
        if not self.batching:
            return [head], True
        picked, rows = [], 0
        for item in order:
            if item.key != head.key:
                continue
            if rows + item.rows > self.max_batch:
                return picked, True
            picked.append(item)
            rows += item.rows
        return picked, rows >= self.max_batch

    def _preferred_prefix(self, picked: list[_Queued]) -> list[_Queued]:
        """The longest prefix whose rows are a preferred batch size; all of them if none is."""
        rows, best = 0, None
        for count, item in enumerate(picked, 1):
            rows += item.rows
            if rows in self.preferred:
                best = count
        return picked if best is None else picked[:best]

    async def _gather(self) -> list[_Queued]:
        loop = asyncio.get_running_loop()
        while self._queue:
            picked, full = self._candidates()
            rows = sum(item.rows for item in picked)
            due = picked[0].enqueued + self.delay_s
            largest_preferred = max(self.preferred, default=math.inf)
            if full or rows >= largest_preferred or loop.time() >= due:
                batch = self._preferred_prefix(picked) if self.preferred else picked
                for item in batch:
                    self._queue.remove(item)
                    if item.timer is not None:
                        item.timer.cancel()
                    if item.acquired is not None:
                        item.acquired(loop.time() - item.enqueued)
                return batch
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), due - loop.time())
            except TimeoutError:
                pass
        return []

    async def _execute(self, batch: list[_Queued]) -> None:
        # The batch runs on the first request's admission; the second one's is held until the
        # batch is settled, so the re-runs that look for a culprit count as in flight too.
        for _ in batch[2:]:
            self.pool.withdraw()
        try:
            await self._settle(batch, admitted=True)
        finally:
            if len(batch) > 1:
                self.pool.withdraw()
            self._free.release()

    async def _settle(self, batch: list[_Queued], admitted: bool) -> None:
        """Runs the batch and hands each request its rows. An execute the kernels refuse as
        the inputs' fault is run again in halves, down to the requests that cause it, so one
        bad request fails alone (with ExecuTorch's reason) and its batch-mates still get
        their answers."""
        try:
            outputs = await self._run(batch, admitted)
        except Exception as exc:
            if len(batch) > 1 and is_input_fault(exc):
                half = len(batch) // 2
                await self._settle(batch[:half], admitted=False)
                await self._settle(batch[half:], admitted=False)
                return
            rows = sum(item.rows for item in batch)
            for item in batch:
                if not item.future.done():
                    item.future.set_exception(self._failure(exc, len(batch), rows))
            return
        if len(batch) == 1:
            if not batch[0].future.done():
                batch[0].future.set_result(outputs)
            return
        offset = 0
        for item in batch:
            if not item.future.done():
                item.future.set_result([o[offset : offset + item.rows] for o in outputs])
            offset += item.rows

    async def _run(self, batch: list[_Queued], admitted: bool) -> list[np.ndarray]:
        rows = sum(item.rows for item in batch)
        if not admitted:
            self.pool.readmit()
        begun = time.perf_counter_ns()
        inputs = (
            batch[0].arrays
            if len(batch) == 1
            else [
                np.concatenate([item.arrays[i] for item in batch])
                for i in range(len(batch[0].arrays))
            ]
        )
        started = time.perf_counter_ns()
        outputs = await self.pool.run_admitted(self.method, inputs, self._executor)
        ended = time.perf_counter_ns()
        for index, output in enumerate(outputs if self.batching else ()):
            if output.ndim == 0 or output.shape[0] != rows:
                raise RuntimeError(
                    f"output {index} has shape {list(output.shape)}, not "
                    f"{rows} rows: the program does not keep the batch "
                    "dimension, so it cannot be batched"
                )
        self._record(rows, started - begun, ended - started, time.perf_counter_ns() - ended)
        return outputs

    def _failure(self, exc: Exception, requests: int, rows: int) -> Exception:
        """A fresh error for each request of a failed batch, naming what failed; a request
        whose own inputs the kernels refused gets that refusal, as if it had run alone."""
        if isinstance(exc, PoolClosed):
            return PoolClosed(self.model)
        if requests == 1 and is_input_fault(exc):
            return exc
        return ExecutionFailed(
            f"executing {self.model!r} method {self.method!r} on a batch of "
            f"{requests} request(s), {rows} row(s), failed: {kernel_reason(exc)}"
        )
