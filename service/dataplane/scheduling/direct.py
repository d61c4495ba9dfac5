"""Direct execution: one execute per request on the method's N instances (ModelPool), with the
queue bound and deadline of default_queue_policy.

The policy of every model without merging or priority levels, so of most small programs: it
adds no task, lock or queue of its own to the pool's wait for a free instance, whose cost is
the floor of a request's time here.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from service.dataplane.scheduling.base import Policy


class DirectPolicy(Policy):
    def __init__(self, *args):
        super().__init__(*args)
        # Read per request: attributes, not the policy's computed properties.
        self._max_queue = self.policy.max_queue_size
        self._timeout_s = self.policy.timeout_s

    @property
    def depth(self) -> int:
        return self.pool.waiting(self.method)

    async def submit(
        self,
        arrays: list[np.ndarray],
        timeout_s: float | None = None,
        acquired: Callable[[float], None] | None = None,
        priority=None,
        outputs: list | None = None,
    ) -> list[np.ndarray]:
        """`outputs`: memory to write outputs into (ModelPool.run's); only this policy takes
        it, since it runs each request on its own."""
        # As in Triton, a model without priority levels ignores the request's `priority`.
        if self._max_queue and self.pool.waiting(self.method) >= self._max_queue:
            raise self._busy(0, self.policy)
        timeout_s = timeout_s if timeout_s is not None else self._timeout_s
        # Batches the client made itself are bounded too, and counted by their rows.
        rows = self._rows(arrays) if self.max_batch else 1
        started = []

        def on_instance(waited_s: float) -> None:
            started.append(time.perf_counter_ns())
            if acquired is not None:
                acquired(waited_s)

        try:
            results = await self.pool.run(
                self.method, arrays, self._executor, on_instance, timeout_s, outputs
            )
        except TimeoutError:
            raise self._expired(timeout_s) from None
        now = time.perf_counter_ns()
        self._record(rows, 0, now - started[0], 0, 1, now)
        return results

    def can_run_now(self) -> bool:
        # It runs at once, never queued (ModelPool.can_run_now), so the bound cannot refuse it.
        return self.pool.can_run_now(self.method)

    def run_now(
        self, arrays: list[np.ndarray], outputs: list | None = None
    ) -> tuple[list, int, int] | None:
        """submit() without a wait, only right after can_run_now said so: (outputs, rows,
        nanoseconds executing); None, with nothing run, when the method's gate has no instance
        free now. The caller counts the execute with its request, in one go
        (service/dataplane/ledger.py). `outputs`: as submit()'s."""
        rows = self._rows(arrays) if self.max_batch else 1
        begun = time.perf_counter_ns()
        outputs = self.pool.run_now(self.method, arrays, outputs)
        if outputs is None:
            return None
        now = time.perf_counter_ns()
        self._recent_execute_s = (now - begun) / 1e9
        self._completed(1, now)
        return outputs, rows, now - begun
