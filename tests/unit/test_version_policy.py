"""version_policy of the model configuration: Triton's three kinds, normalized; every impossible
value refused with a rule; and which stored versions each kind serves."""

import pytest

from service.model_config.parse import parse_model_config
from service.model_config.version_policy import MAX_VERSION, served_versions


def rules(problems):
    return sorted(p.rule for p in problems)


@pytest.mark.parametrize(
    "policy, normalized",
    [
        ({"latest": {"num_versions": 2}}, {"latest": {"num_versions": 2}}),
        ({"latest": {}}, {"latest": {"num_versions": 1}}),
        ({"all": {}}, {"all": {}}),
        ({"specific": {"versions": [3, 1, 3]}}, {"specific": {"versions": [1, 3]}}),
    ],
)
def test_each_kind_is_normalized(policy, normalized):
    config, problems = parse_model_config({"version_policy": policy})
    assert problems == [] and config.version_policy == normalized
    assert config.to_json() == {"version_policy": normalized}


def test_without_a_policy_the_configuration_has_none():
    config, _ = parse_model_config({"max_batch_size": 0})
    assert config.version_policy is None
    assert "version_policy" not in config.to_json()


@pytest.mark.parametrize(
    "policy, rule, words",
    [
        ([], "config.type", "version_policy must be a JSON object"),
        ("latest", "config.type", "version_policy must be a JSON object"),
        ({}, "config.version_policy", "exactly one of latest, all, specific"),
        ({"latest": {}, "all": {}}, "config.version_policy", "not 2"),
        ({"newest": {}}, "config.unknown_key", "version_policy.newest"),
        ({"latest": {"num_versions": 0}}, "config.range", "num_versions"),
        ({"latest": {"num_versions": -3}}, "config.range", "num_versions"),
        ({"latest": {"num_versions": "2"}}, "config.type", "num_versions must be an integer"),
        ({"latest": {"num_versions": True}}, "config.type", "num_versions must be an integer"),
        ({"latest": {"count": 2}}, "config.unknown_key", "version_policy.latest.count"),
        ({"latest": 2}, "config.type", "version_policy.latest must be a JSON object"),
        ({"all": {"versions": [1]}}, "config.unknown_key", "version_policy.all.versions"),
        ({"all": []}, "config.type", "version_policy.all must be a JSON object"),
        ({"specific": {}}, "config.type", "specific.versions must be a non-empty list"),
        ({"specific": {"versions": []}}, "config.type", "non-empty list"),
        ({"specific": {"versions": 2}}, "config.type", "non-empty list"),
        ({"specific": {"versions": [1, 0]}}, "config.range", "specific.versions[]"),
        ({"specific": {"versions": [MAX_VERSION + 1]}}, "config.range", "between 1 and"),
        ({"specific": {"versions": ["1"]}}, "config.type", "specific.versions[]"),
        ({"specific": {"versions": [1], "latest": 1}}, "config.unknown_key", "specific.latest"),
    ],
)
def test_impossible_policies_are_refused_with_a_rule(policy, rule, words):
    config, problems = parse_model_config({"version_policy": policy})
    assert config is None
    assert rule in rules(problems), problems
    assert any(words in p.message for p in problems if p.rule == rule), problems
    assert all(p.file == "config" for p in problems)


@pytest.mark.parametrize(
    "policy, served",
    [
        (None, [5]),
        ({"latest": {"num_versions": 1}}, [5]),
        ({"latest": {"num_versions": 2}}, [3, 5]),
        ({"latest": {"num_versions": 9}}, [1, 3, 5]),
        ({"all": {}}, [1, 3, 5]),
        ({"specific": {"versions": [1, 4, 5]}}, [1, 5]),
        ({"specific": {"versions": [4]}}, []),
    ],
)
def test_the_policy_selects_among_the_stored_versions(policy, served):
    assert served_versions(policy, [5, 1, 3]) == served
