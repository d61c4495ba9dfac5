"""Priority levels of dynamic batching, under Triton's names, checked at ingest.

`priority_levels` N > 0 gives requests levels 1 (taken first) to N; a request names its level
with the `priority` parameter (0 or absent: `default_priority_level`). Each level may have its
own queue policy in `priority_queue_policy` (keys "1".."N"): `max_queue_size` bounds that
level's queue alone, so a full low level never refuses a high one; past
`default_timeout_microseconds` a request is refused (`timeout_action` REJECT) or moved behind
every request that has not timed out (DELAY).
"""

from __future__ import annotations

from service.errors import clip
from service.model_config.checks import Checker
from service.model_config.records import DELAY, REJECT, QueuePolicy

MAX_LEVELS = 64
ACTIONS = (REJECT, DELAY)
_LEVEL_POLICY = ("max_queue_size", "default_timeout_microseconds", "timeout_action")
WHERE = "dynamic_batching"


def parse_priorities(check: Checker, batching: dict) -> tuple[int, int, dict[int, QueuePolicy]]:
    """(levels, default level, the levels' own policies); (0, 0, {}) without levels."""
    levels = check.integer(
        batching.get("priority_levels", 0), f"{WHERE}.priority_levels", 0, MAX_LEVELS
    )
    if not levels:
        for key in ("default_priority_level", "priority_queue_policy"):
            if key in batching:
                check.add(
                    "config.priority",
                    f"{WHERE}.{key} needs {WHERE}.priority_levels of 1 or more",
                )
        return 0, 0, {}
    default = check.integer(
        batching.get("default_priority_level", levels),
        f"{WHERE}.default_priority_level",
        1,
        levels,
    )
    policies = batching.get("priority_queue_policy", {})
    if not isinstance(policies, dict):
        check.add(
            "config.type", f"{WHERE}.priority_queue_policy must be an object of level -> policy"
        )
        policies = {}
    normalized = {}
    for key, value in policies.items():
        where = f"{WHERE}.priority_queue_policy[{clip(key)!r}]"
        if not (isinstance(key, str) and key.isdigit() and 1 <= int(key) <= levels):
            check.add("config.priority", f"{where}: levels are 1 to priority_levels {levels}")
            continue
        policy = check.known(value, where, _LEVEL_POLICY)
        action = policy.get("timeout_action", REJECT)
        if action not in ACTIONS:
            check.add("config.type", f"{where}.timeout_action must be REJECT or DELAY")
        normalized[int(key)] = QueuePolicy(
            check.integer(policy.get("max_queue_size", 0), f"{where}.max_queue_size", 0) or 0,
            check.integer(
                policy.get("default_timeout_microseconds", 0),
                f"{where}.default_timeout_microseconds",
                0,
            )
            or 0,
            action,
        )
    return levels, default or levels, dict(sorted(normalized.items()))
