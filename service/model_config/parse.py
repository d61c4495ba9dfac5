"""Per-model configuration under Triton's model-configuration JSON names, checked at ingest.

Users bring configurations written for Triton, so the keys are Triton's (`max_batch_size`,
`dynamic_batching`, `instance_group`, `parameters` for the TensorRT delegate's knobs); anything
else is refused rather than ignored, because a misspelt key silently ignored is a batching
setting the user believes in and does not get.
Values are checked against the program too: a batch dimension the program cannot take would
otherwise only fail at the first batched request.

The result is a typed record (service.model_config.records), stored in the model description
in its normalized JSON (every dynamic-batching field present), so what a model runs with can be
read from GET /models/{name}; a stored description is read back through this same parser.
"""

from __future__ import annotations

import json

from service.errors import Problem
from service.model_config.checks import TOP, Checker, problem
from service.model_config.parameters import parse_parameters
from service.model_config.priority import parse_priorities
from service.model_config.records import DynamicBatching, InstanceGroup, ModelConfig, QueuePolicy
from service.model_config.version_policy import parse_version_policy
from service.model_config.warmup import check_warmups, parse_warmups

_MAX_INSTANCES = 64
_MAX_DELAY_US = 60_000_000

_TOP = (
    "max_batch_size",
    "dynamic_batching",
    "instance_group",
    "model_warmup",
    "version_policy",
    "parameters",
)
_BATCHING = (
    "max_queue_delay_microseconds",
    "preferred_batch_size",
    "default_queue_policy",
    "priority_levels",
    "default_priority_level",
    "priority_queue_policy",
)
_POLICY = ("max_queue_size", "default_timeout_microseconds")
_GROUP = ("count",)


def decode_config(text: str | bytes) -> tuple[object, list[Problem]]:
    """The JSON value of a configuration text; structure is parse_model_config's job, so a
    transport can decode early and leave the rest to the ingest pipeline."""
    try:
        return json.loads(text), []
    except (ValueError, UnicodeDecodeError) as exc:
        return None, [problem("config.json", f"the model configuration is not JSON: {exc}")]


def parse_model_config(
    source: str | bytes | dict | None,
) -> tuple[ModelConfig | None, list[Problem]]:
    """(configuration, problems); (None, []) for no configuration at all, None with problems.

    Accepts the JSON text (the upload's `config` field, the repository `load` parameter, a
    model directory's config.json) or an already decoded object.
    """
    if isinstance(source, (str, bytes)):
        source, problems = decode_config(source)
        if problems:
            return None, problems
    if source is None:
        return None, []
    check = Checker()
    top = check.known(source, TOP, _TOP)
    max_batch = None
    if "max_batch_size" in top:
        max_batch = check.integer(top["max_batch_size"], "max_batch_size", 0) or 0
    config = ModelConfig(
        max_batch,
        (
            _batching(check, top["dynamic_batching"], max_batch or 0, top.get("max_batch_size", 0))
            if "dynamic_batching" in top
            else None
        ),
        _groups(check, top["instance_group"]) if "instance_group" in top else None,
        (
            parse_warmups(check, top["model_warmup"], max_batch or 0)
            if "model_warmup" in top
            else None
        ),
        (parse_version_policy(check, top["version_policy"]) if "version_policy" in top else None),
        parse_parameters(check, top["parameters"]) if "parameters" in top else None,
    )
    return (None if check.problems else config), check.problems


def stored_config(data: dict | None) -> ModelConfig | None:
    """The configuration a stored description holds (written by ModelConfig.to_json from a
    configuration this parser accepted, so it parses again)."""
    config, problems = parse_model_config(data)
    if problems:
        raise ValueError(f"stored model configuration is invalid: {problems[0].message}")
    return config


def _batching(check: Checker, value, max_batch: int, given) -> DynamicBatching:
    batching = check.known(value, "dynamic_batching", _BATCHING)
    # Without max_batch_size (absent or 0) requests are never merged: dynamic_batching then only
    # carries the queue policy, and merging settings would be believed in and never applied.
    merging = [
        k
        for k in ("max_queue_delay_microseconds", "preferred_batch_size")
        if batching.get(k) not in (None, 0, [])
    ]
    if merging and given == 0 and not isinstance(given, bool):  # a wrong type is reported once
        check.problems.append(
            problem(
                "config.batching_without_batch",
                f"dynamic_batching.{merging[0]} needs "
                "max_batch_size of 1 or more (the most rows one execute may take); without it "
                "requests are not merged and only default_queue_policy applies",
            )
        )
    delay = check.integer(
        batching.get("max_queue_delay_microseconds", 0),
        "dynamic_batching.max_queue_delay_microseconds",
        0,
        _MAX_DELAY_US,
    )
    preferred = batching.get("preferred_batch_size", [])
    sizes = []
    if not isinstance(preferred, list):
        check.problems.append(
            problem(
                "config.type", "dynamic_batching.preferred_batch_size must be a list of integers"
            )
        )
        preferred = []
    for size in preferred:
        size = check.integer(size, "dynamic_batching.preferred_batch_size[]", 1)
        if size is not None and max_batch and size > max_batch:
            check.problems.append(
                problem(
                    "config.preferred_batch_size",
                    f"preferred batch size {size} is larger than max_batch_size {max_batch}",
                )
            )
        elif size is not None:
            sizes.append(size)
    policy = check.known(
        batching.get("default_queue_policy", {}), "dynamic_batching.default_queue_policy", _POLICY
    )
    where = "dynamic_batching.default_queue_policy."
    levels, default_level, per_level = parse_priorities(check, batching)
    return DynamicBatching(
        delay or 0,
        tuple(sorted(set(sizes))),
        QueuePolicy(
            check.integer(policy.get("max_queue_size", 0), where + "max_queue_size", 0) or 0,
            check.integer(
                policy.get("default_timeout_microseconds", 0),
                where + "default_timeout_microseconds",
                0,
            )
            or 0,
        ),
        levels,
        default_level,
        per_level,
    )


def _groups(check: Checker, value) -> tuple[InstanceGroup, ...]:
    if not isinstance(value, list) or not value:
        check.problems.append(
            problem(
                "config.type",
                'instance_group must be a non-empty list of objects like {"count": 2}',
            )
        )
        return ()
    groups = []
    for index, group in enumerate(value):
        group = check.known(group, f"instance_group[{index}]", _GROUP)
        count = check.integer(
            group.get("count", 1), f"instance_group[{index}].count", 1, _MAX_INSTANCES
        )
        groups.append(InstanceGroup(count or 1))
    if sum(group.count for group in groups) > _MAX_INSTANCES:
        check.problems.append(
            problem(
                "config.range",
                f"instance_group counts add up to more than {_MAX_INSTANCES} instances",
            )
        )
    return tuple(groups)


def check_model_config(config: ModelConfig | None, methods_meta: list[dict]) -> list[Problem]:
    """Problems of a parsed configuration with this program's methods (metas as the host or
    service.ingest.inspection describe them): batching, and warmups that do not fit."""
    if config is None:
        return []
    return _batchable(config, methods_meta) + check_warmups(config, methods_meta)


def _batchable(config: ModelConfig, methods_meta: list[dict]) -> list[Problem]:
    """Batching concatenates requests along dim 0 and slices every output along dim 0, so every
    input and output of every method must be a tensor whose shape may vary, with room for
    max_batch_size rows. Program metadata marks a tensor dynamic as a whole, not per dimension:
    a program whose dynamic dimension is not the first one passes here and fails its batches.
    """
    max_batch = config.max_batch
    if not max_batch:
        return []
    problems = []
    for meta in methods_meta:
        for role in ("inputs", "outputs"):
            for index, spec in enumerate(meta.get(role, [])):
                where = f"method {meta['name']!r} {role[:-1]} {index}"
                shape = spec.get("shape", [])
                if spec.get("tag", "Tensor") != "Tensor" or not shape:
                    problems.append(
                        problem(
                            "config.not_batchable",
                            (
                                f"max_batch_size {max_batch}: {where} is not a tensor with a "
                                "leading batch dimension"
                            ),
                        )
                    )
                elif not spec.get("dynamic"):
                    problems.append(
                        problem(
                            "config.not_batchable",
                            (
                                f"max_batch_size {max_batch}: {where} has the static shape "
                                f"{shape}; batching needs a dynamic leading (batch) dimension "
                                "(export with torch.export.Dim on dim 0)"
                            ),
                        )
                    )
                elif shape[0] < max_batch:
                    problems.append(
                        problem(
                            "config.max_batch_size",
                            (
                                f"max_batch_size {max_batch} is larger than the upper bound "
                                f"{shape[0]} of dim 0 of {where} (shape bound {shape})"
                            ),
                        )
                    )
    return problems
