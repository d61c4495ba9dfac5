"""Priority levels (dynamic_batching.priority_levels): the batching queue taken highest level
first, arrival order within a level.

Each level has its own bound and deadline (priority_queue_policy, else default_queue_policy),
so a full low level never refuses a high one, and a request past a DELAY deadline goes behind
all the others instead of being refused. A model with levels but no merging queues here too,
one request per execute, since a pool's wait for an instance knows no order but arrival.
"""

from __future__ import annotations

from service.dataplane.scheduling.batching import BatchingPolicy, Queued
from service.errors import clip, invalid
from service.model_config.records import QueuePolicy


class PriorityPolicy(BatchingPolicy):
    def __init__(self, *args):
        super().__init__(*args)
        batching = self.config.queue
        self.levels = batching.priority_levels
        self.default_level = batching.default_priority_level
        self._policies = {level: batching.policy_of(level) for level in range(1, self.levels + 1)}

    def _level(self, priority) -> int:
        """The request's level: its `priority` parameter, 0 or absent for the default one."""
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

    def _policy(self, level: int) -> QueuePolicy:
        return self._policies[level]

    def _waiting(self, level: int) -> int:
        return sum(1 for item in self._queue if item.level == level)

    def _ordered(self) -> list[Queued]:
        # Stable: arrival order within a level, timed-out DELAY requests after all others.
        return sorted(self._queue, key=lambda item: (item.delayed, item.level))
