"""Dynamic batching: requests to a method queue here and run merged.

On a GPU one execute of 32 rows costs about what one of a single row costs when the weights, not
the arithmetic, bound the time; merging concurrent requests is then the main lever for
throughput. A request queues, waits at most the configured delay for company, and runs with
compatible requests (same dtypes and same dims past dim 0) as one execute; each gets back
exactly its own rows of every output. At most one batch per instance runs at a time, so the
queue, not the pool, holds whoever waits; an execute that ends starts the next batch before its
own requests are answered (_pump), and a request whose deadline passes while queued is
dropped unexecuted; one whose awaiting task is cancelled (its client went away) leaves the
queue before it can be executed.

The priority policy (service.dataplane.scheduling.priority) is this queue taken in another
order, also for models that do not merge (`merges` False: one request per execute).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from service.dataplane.kernel_errors import is_input_fault, kernel_reason
from service.dataplane.model_pool import PoolClosed
from service.dataplane.scheduling.base import Policy
from service.errors import server_fault


@dataclass(eq=False)
class Queued:
    arrays: list[np.ndarray]
    rows: int
    key: tuple  # dtypes and dims past dim 0: only equal keys are merged
    future: asyncio.Future
    enqueued: float
    acquired: Callable[[float], None] | None
    level: int = 0  # priority level: lower is taken first (0: the model has no levels)
    delayed: bool = False  # timed out under timeout_action DELAY: behind every other request
    timer: asyncio.TimerHandle | None = None


class BatchingPolicy(Policy):
    def __init__(self, *args):
        super().__init__(*args)
        self.merges = self.config.merges
        batching = self.config.queue
        self.delay_s = batching.delay_s
        self.preferred = set(batching.preferred_batch_size)
        self._largest_preferred = max(self.preferred, default=math.inf)
        self._queue: list[Queued] = []
        self._idle = self._instances  # instances no batch of this policy holds
        self._pumping = False  # a _pump is scheduled for the end of this loop turn
        self._timer: asyncio.TimerHandle | None = None  # a _pump for when the head's delay ends
        self._tasks: set[asyncio.Task] = set()  # batches on a task: _execute, _retry

    @property
    def depth(self) -> int:
        return len(self._queue)

    def _ordered(self) -> list[Queued]:
        """The queue in the order it is taken."""
        return self._queue

    async def submit(
        self,
        arrays: list[np.ndarray],
        timeout_s: float | None = None,
        acquired: Callable[[float], None] | None = None,
        priority=None,
    ) -> list[np.ndarray]:
        level, policy = self._admit(priority)
        timeout_s = timeout_s if timeout_s is not None else policy.timeout_s
        # Without merging a request is an execute of its own: one row, never merged.
        rows = self._rows(arrays) if self.merges else 1
        loop = asyncio.get_running_loop()
        self.pool.admit()
        key = tuple((a.dtype.str, a.shape[1:]) for a in arrays)
        item = Queued(arrays, rows, key, loop.create_future(), loop.time(), acquired, level)
        if timeout_s is not None:
            item.timer = loop.call_later(timeout_s, self._expire, item, timeout_s, policy.delays)
        self._queue.append(item)
        if not self._pumping:
            # At the end of this turn, so that the requests that arrived with this one (a
            # front's messages come in bursts) can join its batch.
            self._pumping = True
            loop.call_soon(self._pump)
        try:
            return await item.future
        except asyncio.CancelledError:
            self._drop(item)
            raise

    def _drop(self, item: Queued) -> bool:
        """Takes a request out of the queue unexecuted; False once it is in a batch."""
        if item not in self._queue:
            return False
        self._queue.remove(item)
        if item.timer is not None:
            item.timer.cancel()
        self.pool.withdraw()
        return True

    def _expire(self, item: Queued, timeout_s: float, delay: bool) -> None:
        if delay:
            item.delayed = True
            self._pump()  # the order changed
            return
        if self._drop(item) and not item.future.done():
            item.future.set_exception(self._expired(timeout_s))

    # -- forming batches -------------------------------------------------------------------------

    def _pump(self) -> None:
        """Starts a batch on every idle instance while one is due. Called wherever that can
        change (requests arrived, an execute ended, the head's delay passed, the order
        changed), synchronously, never through a task: an execute that ends starts the next
        batch before its own requests are answered, so the device does not wait behind the
        event loop's turns (answering 32 requests is 32 requests' work on the engine's one
        thread, a wait of milliseconds, against a batch that executes in hundreds of
        microseconds)."""
        self._pumping = False
        while self._queue and self._idle > 0:
            batch = self._take()
            if not batch:
                return
            self._idle -= 1
            self._start(batch)

    def _candidates(self) -> tuple[list[Queued], bool]:
        """The first request in the queue's order and the compatible ones after it that fit,
        in that order; and whether the batch is full (the next compatible one would not
        fit)."""
        order = self._ordered()
        head = order[0]
        if not self.merges:
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

    def _preferred_prefix(self, picked: list[Queued]) -> list[Queued]:
        """The longest prefix whose rows are a preferred batch size; all of them if none is."""
        rows, best = 0, None
        for count, item in enumerate(picked, 1):
            rows += item.rows
            if rows in self.preferred:
                best = count
        return picked if best is None else picked[:best]

    def _take(self) -> list[Queued]:
        """The batch to run now, taken out of the queue; none while its head may still wait
        for company (a _pump is then set for when that wait ends)."""
        loop = asyncio.get_running_loop()
        picked, full = self._candidates()
        rows = sum(item.rows for item in picked)
        due = picked[0].enqueued + self.delay_s
        now = loop.time()
        if not (full or rows >= self._largest_preferred or now >= due):
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(due, self._pump)
            return []
        batch = self._preferred_prefix(picked) if self.preferred else picked
        # One pass, not a remove() per request: a queue of hundreds is walked once per batch.
        taken = {id(item) for item in batch}
        self._queue = [item for item in self._queue if id(item) not in taken]
        for item in batch:
            if item.timer is not None:
                item.timer.cancel()
            if item.acquired is not None:
                item.acquired(now - item.enqueued)
        return batch

    # -- executing -------------------------------------------------------------------------------

    def _start(self, batch: list[Queued]) -> None:
        """Hands the batch to a worker thread on an instance free now (ModelPool.start);
        where there is none free now, or the method runs inline, to a task that waits for
        one (_execute)."""
        # The batch runs on the first request's admission; the second one's is held until the
        # batch is settled, so the re-runs that look for a culprit count as in flight too.
        for _ in batch[2:]:
            self.pool.withdraw()
        begun = time.perf_counter_ns()
        inputs = self._inputs(batch)
        started = time.perf_counter_ns()
        running = self.pool.start(self.method, inputs, self._executor)
        if running is None:
            self._on_task(self._execute(batch, inputs))
            return
        running.add_done_callback(lambda done: self._ended(batch, done, started - begun, started))

    def _on_task(self, work) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _ended(self, batch: list[Queued], done: asyncio.Future, input_ns: int, started: int):
        """The end of a batch ModelPool.start ran: the next batch starts at once, then this
        one's requests get their rows."""
        ended = time.perf_counter_ns()
        try:
            outputs = self._checked(batch, done.result())
        except Exception as exc:
            if len(batch) > 1 and is_input_fault(exc):
                self._on_task(self._retry(batch))  # holds the instance's share until settled
                return
            self._next()
            self._fail(batch, exc)
        else:
            self._next()
            self._hand_out(batch, outputs)
            now = time.perf_counter_ns()
            rows = sum(item.rows for item in batch)
            self._record(rows, input_ns, ended - started, now - ended, len(batch), now)
        if len(batch) > 1:
            self.pool.withdraw()

    def _next(self) -> None:
        """A batch gave its instance back: the next one may start."""
        self._idle += 1
        self._pump()

    async def _execute(self, batch: list[Queued], inputs: list[np.ndarray]) -> None:
        try:
            await self._settle(batch, admitted=True, inputs=inputs)
        finally:
            if len(batch) > 1:
                self.pool.withdraw()
            self._next()

    async def _retry(self, batch: list[Queued]) -> None:
        """A batch the kernels refused as the inputs' fault, run again in halves (_settle);
        its first run's admission ended with that run."""
        try:
            half = len(batch) // 2
            await self._settle(batch[:half], admitted=False)
            await self._settle(batch[half:], admitted=False)
        finally:
            self.pool.withdraw()
            self._next()

    async def _settle(
        self, batch: list[Queued], admitted: bool, inputs: list[np.ndarray] | None = None
    ) -> None:
        """Runs the batch and hands each request its rows. An execute the kernels refuse as
        the inputs' fault is run again in halves, down to the requests that cause it, so one
        bad request fails alone (with ExecuTorch's reason) and its batch-mates still get
        their answers."""
        try:
            outputs = await self._run(batch, admitted, inputs)
        except Exception as exc:
            if len(batch) > 1 and is_input_fault(exc):
                half = len(batch) // 2
                await self._settle(batch[:half], admitted=False)
                await self._settle(batch[half:], admitted=False)
                return
            self._fail(batch, exc)
            return
        self._hand_out(batch, outputs)

    async def _run(
        self, batch: list[Queued], admitted: bool, inputs: list[np.ndarray] | None
    ) -> list[np.ndarray]:
        if not admitted:
            self.pool.readmit()
        begun = time.perf_counter_ns()
        if inputs is None:
            inputs = self._inputs(batch)
        started = time.perf_counter_ns()
        outputs = await self.pool.run_admitted(self.method, inputs, self._executor)
        ended = time.perf_counter_ns()
        self._checked(batch, outputs)
        now = time.perf_counter_ns()
        rows = sum(item.rows for item in batch)
        self._record(rows, started - begun, ended - started, now - ended, len(batch), now)
        return outputs

    @staticmethod
    def _inputs(batch: list[Queued]) -> list[np.ndarray]:
        """The batch's inputs: its requests' rows one after the other."""
        if len(batch) == 1:
            return batch[0].arrays
        return [
            np.concatenate([item.arrays[i] for item in batch]) for i in range(len(batch[0].arrays))
        ]

    def _checked(self, batch: list[Queued], outputs: list[np.ndarray]) -> list[np.ndarray]:
        """The outputs, where each keeps the batch's rows (else no request's rows are known)."""
        rows = sum(item.rows for item in batch)
        for index, output in enumerate(outputs if self.merges else ()):
            if output.ndim == 0 or output.shape[0] != rows:
                raise RuntimeError(
                    f"output {index} has shape {list(output.shape)}, not "
                    f"{rows} rows: the program does not keep the batch "
                    "dimension, so it cannot be batched"
                )
        return outputs

    @staticmethod
    def _hand_out(batch: list[Queued], outputs: list[np.ndarray]) -> None:
        """Each request its own rows of every output: views of the batch's outputs."""
        if len(batch) == 1:
            if not batch[0].future.done():
                batch[0].future.set_result(outputs)
            return
        offset = 0
        for item in batch:
            if not item.future.done():
                item.future.set_result([o[offset : offset + item.rows] for o in outputs])
            offset += item.rows

    def _fail(self, batch: list[Queued], exc: Exception) -> None:
        rows = sum(item.rows for item in batch)
        for item in batch:
            if not item.future.done():
                item.future.set_exception(self._failure(exc, len(batch), rows))

    def _failure(self, exc: Exception, requests: int, rows: int) -> Exception:
        """A fresh error for each request of a failed batch, naming what failed; a request
        whose own inputs the kernels refused gets that refusal, as if it had run alone."""
        if isinstance(exc, PoolClosed):
            return PoolClosed(self.model)
        if requests == 1 and is_input_fault(exc):
            return exc
        return server_fault(
            f"executing {self.model!r} method {self.method!r} on a batch of "
            f"{requests} request(s), {rows} row(s)",
            kernel_reason(exc),
        )
