"""Per model+method request scheduling, as one of three policies behind one interface
(service.dataplane.scheduling.base.Policy: submit, depth):

- direct execution (scheduling.direct): one execute per request on the method's instances;
- dynamic batching (scheduling.batching): concurrent compatible requests merged into one execute;
- priority queues (scheduling.priority): the batching queue taken highest level first.

Overload must turn into a quick, honest "busy" rather than timeouts for everyone, so each
policy's full queue refuses at once (Busy, with a retry hint from the queue's measured drain
time), and a request whose deadline passes while queued is dropped unexecuted
(DeadlineExceeded). Requests from every protocol and front meet in the one policy object of
their model method, in arrival order.
"""

from __future__ import annotations

from service.dataplane.scheduling.base import Policy
from service.dataplane.scheduling.batching import BatchingPolicy
from service.dataplane.scheduling.direct import DirectPolicy
from service.dataplane.scheduling.priority import PriorityPolicy
from service.model_config.records import ModelConfig

__all__ = ["Policy", "policy_for"]


def policy_for(config: ModelConfig) -> type[Policy]:
    """The scheduling policy a model's configuration asks for."""
    if config.queue.priority_levels:
        return PriorityPolicy
    return BatchingPolicy if config.merges else DirectPolicy
