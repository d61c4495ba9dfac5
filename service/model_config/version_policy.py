"""`version_policy` of the model configuration, under Triton's names: which of a model's stored
versions are served.

Exactly one of `latest {num_versions}` (the highest N stored versions; the default, with N 1),
`all {}` or `specific {versions}` (those numbers, where stored). The policy of a model is the
one in the configuration of its highest stored version, as Triton has one configuration for
all of a model's versions; a repository load gives every version it carries the same one.
"""

from __future__ import annotations

from collections.abc import Iterable

from service import rules
from service.model_config.checks import LIMIT, Checker

WHERE = "version_policy"
KINDS = ("latest", "all", "specific")
DEFAULT = {"latest": {"num_versions": 1}}
# Version numbers are positive; JSON integers past LIMIT are not exact in every client.
MAX_VERSION = LIMIT


def parse_version_policy(check: Checker, value) -> dict:
    """The normalized policy ({"latest": {"num_versions": N}}, {"all": {}} or
    {"specific": {"versions": [sorted, unique]}}); DEFAULT where it has problems."""
    policy = check.known(value, WHERE, KINDS)
    kinds = [kind for kind in KINDS if kind in policy]
    if len(kinds) != 1:
        if policy or isinstance(value, dict):
            check.add(
                rules.CONFIG_VERSION_POLICY,
                f"{WHERE} must hold exactly one of {', '.join(KINDS)}"
                + (f", not {len(kinds)}" if kinds else ""),
            )
        return DEFAULT
    kind = kinds[0]
    if kind == "latest":
        latest = check.known(policy["latest"], f"{WHERE}.latest", ("num_versions",))
        count = check.integer(
            latest.get("num_versions", 1), f"{WHERE}.latest.num_versions", 1, MAX_VERSION
        )
        return {"latest": {"num_versions": count or 1}}
    if kind == "all":
        check.known(policy["all"], f"{WHERE}.all", ())
        return {"all": {}}
    specific = check.known(policy["specific"], f"{WHERE}.specific", ("versions",))
    versions = specific.get("versions")
    if not isinstance(versions, list) or not versions:
        check.add(
            rules.CONFIG_TYPE, f"{WHERE}.specific.versions must be a non-empty list of integers"
        )
        return DEFAULT
    numbers = [check.integer(v, f"{WHERE}.specific.versions[]", 1, MAX_VERSION) for v in versions]
    return {"specific": {"versions": sorted({n for n in numbers if n is not None})}}


def served_versions(policy: dict | None, stored: Iterable[int]) -> list[int]:
    """The stored versions the policy serves, ascending."""
    stored = sorted(set(stored))
    policy = policy or DEFAULT
    if "all" in policy:
        return stored
    if "specific" in policy:
        wanted = set(policy["specific"]["versions"])
        return [v for v in stored if v in wanted]
    count = policy["latest"]["num_versions"]
    return stored[-count:]
