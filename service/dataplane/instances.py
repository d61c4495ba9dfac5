"""How many instances each method of a model gets.

Each instance is one request executing at a time; what it costs is its own planned memory (and
whatever its delegates hold per instance), never a second copy of the program. The count is the
model config's `instance_group`, else the server's `--instances`, else automatic:

- a small program (at most SMALL_PROGRAM_BYTES of program and data files, every method's
  instance planning at most SMALL_PLANNED_BYTES, all of it in host memory, no GPU delegate) gets
  one instance per front (`--workers`, at least BASE). Measured on the 16-core host, tiny
  requests through 8 fronts went 0.75-0.96x the 8-process floor with 2 instances and 1.86x with
  8: with fewer instances than fronts, the fronts' engine lane threads wait on each other for the
  few instances, though each execute takes microseconds and the extra ones cost kilobytes;
- any other program gets BASE, so a large model (or one holding GPU memory per instance) costs
  no more memory than before.
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024
BASE = 2
SMALL_PROGRAM_BYTES = 16 * MiB
SMALL_PLANNED_BYTES = 16 * MiB


@dataclass(frozen=True)
class InstancePlan:
    """`fixed`: the count the model's config or the server set (None: automatic); `fronts`:
    the server's front processes; `gpu_delegates`: ids of delegates that hold device memory."""

    fixed: int | None
    fronts: int
    gpu_delegates: frozenset[str] = frozenset()

    @property
    def first(self) -> int:
        """Instances to load before anything about the method is known."""
        return self.fixed if self.fixed is not None else BASE

    def more(self, program_bytes: int, meta: dict) -> int:
        """Instances to add once the first one's `meta` (Method.meta) says what one costs."""
        if self.fixed is not None or self.fronts <= BASE:
            return 0
        buffers = meta.get("planned_buffers", ())
        small = (
            program_bytes <= SMALL_PROGRAM_BYTES
            and sum(buffer["size"] for buffer in buffers) <= SMALL_PLANNED_BYTES
            and all(buffer["device"] == "cpu" for buffer in buffers)
            and not self.gpu_delegates.intersection(meta.get("delegates", ()))
        )
        return self.fronts - BASE if small else 0


def plan_for(config_count: int | None, settings, gpu_delegates=frozenset()) -> InstancePlan:
    """`config_count`: the model config's instance_group count, None when it sets none."""
    fixed = config_count if config_count is not None else settings.instances_per_model
    return InstancePlan(fixed, settings.workers, frozenset(gpu_delegates))
