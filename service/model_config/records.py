"""A model's configuration as typed records: what ingest accepted, read by attribute everywhere.

The parser (service.model_config.parse) is the only reader of the configuration's JSON and
`to_json` the only writer, so a key's name and default are stated once. A top-level section
that was not sent stays None rather than taking its default: the description shows the
configuration as it was given (normalized within each section), and "sent max_batch_size 0"
reads differently from "sent nothing" to a user checking what their upload carried.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from service.model_config.parameters import TensorRTParameters

REJECT, DELAY = "REJECT", "DELAY"


@dataclass(frozen=True)
class QueuePolicy:
    """How long and how many requests may wait: of a model, or of one priority level."""

    max_queue_size: int = 0  # 0: unbounded
    default_timeout_microseconds: int = 0  # 0: no limit
    timeout_action: str = REJECT  # past the timeout: refused (REJECT) or moved behind (DELAY)

    @property
    def timeout_s(self) -> float | None:
        return self.default_timeout_microseconds / 1e6 or None

    @property
    def delays(self) -> bool:
        return self.timeout_action == DELAY

    def to_json(self, with_action: bool = True) -> dict:
        answer = {
            "max_queue_size": self.max_queue_size,
            "default_timeout_microseconds": self.default_timeout_microseconds,
        }
        if with_action:
            answer["timeout_action"] = self.timeout_action
        return answer


@dataclass(frozen=True)
class DynamicBatching:
    """The queue of each model method: merging (with max_batch_size), bounds, priority levels."""

    max_queue_delay_microseconds: int = 0
    preferred_batch_size: tuple[int, ...] = ()  # sorted, distinct
    default_queue_policy: QueuePolicy = QueuePolicy()
    priority_levels: int = 0  # 0: none; else levels 1 (taken first) to N
    default_priority_level: int = 0
    # Levels with a policy of their own; the others have default_queue_policy.
    priority_queue_policy: Mapping[int, QueuePolicy] = field(default_factory=dict)

    @property
    def delay_s(self) -> float:
        return self.max_queue_delay_microseconds / 1e6

    def policy_of(self, level: int) -> QueuePolicy:
        """The queue policy of a priority level (0: the model has none)."""
        return self.priority_queue_policy.get(level, self.default_queue_policy)

    def to_json(self) -> dict:
        answer = {
            "max_queue_delay_microseconds": self.max_queue_delay_microseconds,
            "preferred_batch_size": list(self.preferred_batch_size),
            "default_queue_policy": self.default_queue_policy.to_json(with_action=False),
        }
        if self.priority_levels:
            answer["priority_levels"] = self.priority_levels
            answer["default_priority_level"] = self.default_priority_level
            answer["priority_queue_policy"] = {
                str(level): policy.to_json()
                for level, policy in sorted(self.priority_queue_policy.items())
            }
        return answer


@dataclass(frozen=True)
class InstanceGroup:
    count: int = 1


@dataclass(frozen=True)
class WarmupInput:
    data_type: str  # Triton's name: TYPE_FP32, ...
    dims: tuple[int, ...]  # without the batch dimension when the model batches
    random: bool  # random_data, else zero_data

    def to_json(self) -> dict:
        return {
            "data_type": self.data_type,
            "dims": list(self.dims),
            "random_data" if self.random else "zero_data": True,
        }


@dataclass(frozen=True)
class Warmup:
    name: str
    batch_size: int
    inputs: Mapping[str, WarmupInput]
    count: int  # extra runs: 0 runs it once

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "batch_size": self.batch_size,
            "inputs": {name: given.to_json() for name, given in self.inputs.items()},
            "count": self.count,
        }


@dataclass(frozen=True)
class ModelConfig:
    max_batch_size: int | None = None
    dynamic_batching: DynamicBatching | None = None
    instance_group: tuple[InstanceGroup, ...] | None = None
    model_warmup: tuple[Warmup, ...] | None = None
    # Normalized by service.model_config.version_policy: {"latest": {"num_versions": N}},
    # {"all": {}} or {"specific": {"versions": [...]}}.
    version_policy: Mapping | None = None
    # The TensorRT delegate's knobs (Triton's `parameters`, service.model_config.parameters).
    parameters: TensorRTParameters | None = None

    @property
    def tensorrt(self) -> TensorRTParameters:
        return self.parameters or _NO_PARAMETERS

    @property
    def max_batch(self) -> int:
        """Most rows one execute takes; 0: the model has no batch dimension."""
        return self.max_batch_size or 0

    @property
    def merges(self) -> bool:
        """Whether concurrent requests are merged into one execute."""
        return self.dynamic_batching is not None and self.max_batch > 0

    @property
    def queue(self) -> DynamicBatching:
        """The queue settings, defaults where dynamic_batching was not sent."""
        return self.dynamic_batching or _NO_BATCHING

    @property
    def warmups(self) -> tuple[Warmup, ...]:
        return self.model_warmup or ()

    @property
    def instance_count(self) -> int | None:
        """Instances per method the instance_group counts ask for; None when none are set
        (the server decides: service/dataplane/instances.py)."""
        groups = self.instance_group
        return sum(group.count for group in groups) if groups else None

    def to_json(self) -> dict:
        answer: dict = {}
        if self.max_batch_size is not None:
            answer["max_batch_size"] = self.max_batch_size
        if self.dynamic_batching is not None:
            answer["dynamic_batching"] = self.dynamic_batching.to_json()
        if self.instance_group is not None:
            answer["instance_group"] = [{"count": group.count} for group in self.instance_group]
        if self.model_warmup is not None:
            answer["model_warmup"] = [warmup.to_json() for warmup in self.model_warmup]
        if self.version_policy is not None:
            answer["version_policy"] = dict(self.version_policy)
        if self.parameters is not None:
            answer["parameters"] = self.parameters.to_json()
        return answer


_NO_BATCHING = DynamicBatching()
_NO_PARAMETERS = TensorRTParameters()
NO_CONFIG = ModelConfig()
