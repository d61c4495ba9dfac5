"""Model configuration: Triton's names parsed, impossible values refused with a rule each."""

import pytest

from service.ingest.model_config import check_model_config, instance_count, parse_model_config
from support.program_fixtures import linear_relu_program  # noqa: F401


def rules(problems):
    return sorted(p.rule for p in problems)


def meta(*inputs, outputs=None, name="forward"):
    def spec(shape, dynamic):
        return {"tag": "Tensor", "dtype": "float32", "shape": shape, "dynamic": dynamic}

    return {
        "name": name,
        "inputs": [spec(*i) for i in inputs],
        "outputs": [spec(*o) for o in (outputs or inputs)],
    }


def test_a_full_configuration_is_normalized_with_every_batching_field():
    config, problems = parse_model_config(
        '{"max_batch_size": 8, "dynamic_batching": {"preferred_batch_size": [8, 4, 4]}, '
        '"instance_group": [{"count": 2}, {"count": 1}]}'
    )
    assert problems == []
    assert config == {
        "max_batch_size": 8,
        "dynamic_batching": {
            "max_queue_delay_microseconds": 0,
            "preferred_batch_size": [4, 8],
            "default_queue_policy": {"max_queue_size": 0, "default_timeout_microseconds": 0},
        },
        "instance_group": [{"count": 2}, {"count": 1}],
    }
    assert instance_count(config, 5) == 3
    assert parse_model_config(config) == (config, [])  # stored form parses to itself


def test_no_configuration_is_none_and_keeps_the_server_instances():
    assert parse_model_config(None) == (None, [])
    assert instance_count(None, 5) == 5 and instance_count({}, 5) == 5


@pytest.mark.parametrize(
    "text, rule, words",
    [
        ("{max_batch_size: 8}", "config.json", "not JSON"),
        ("[1, 2]", "config.type", "JSON object"),
        ('{"max_batch": 8}', "config.unknown_key", "max_batch"),
        (
            '{"dynamic_batching": {"max_queue_delay": 5}, "max_batch_size": 2}',
            "config.unknown_key",
            "dynamic_batching.max_queue_delay",
        ),
        (
            '{"max_batch_size": 2, "dynamic_batching": {"default_queue_policy": {"size": 1}}}',
            "config.unknown_key",
            "default_queue_policy.size",
        ),
        ('{"instance_group": [{"count": 1, "kind": "KIND_GPU"}]}', "config.unknown_key", "kind"),
        ('{"max_batch_size": -1}', "config.range", "max_batch_size"),
        ('{"max_batch_size": true}', "config.type", "integer"),
        ('{"max_batch_size": 2.5}', "config.type", "integer"),
        (
            '{"max_batch_size": 4, "dynamic_batching": {"preferred_batch_size": [8]}}',
            "config.preferred_batch_size",
            "larger than max_batch_size 4",
        ),
        (
            '{"max_batch_size": 4, "dynamic_batching": {"preferred_batch_size": 4}}',
            "config.type",
            "list",
        ),
        (
            '{"dynamic_batching": {"max_queue_delay_microseconds": 100}}',
            "config.batching_without_batch",
            "max_batch_size",
        ),
        (
            '{"max_batch_size": 4, "dynamic_batching": {"max_queue_delay_microseconds": -1}}',
            "config.range",
            "max_queue_delay_microseconds",
        ),
        (
            '{"max_batch_size": 4, "dynamic_batching": {"default_queue_policy": '
            '{"max_queue_size": -3}}}',
            "config.range",
            "max_queue_size",
        ),
        ('{"instance_group": []}', "config.type", "non-empty"),
        ('{"instance_group": [{"count": 0}]}', "config.range", "count"),
        ('{"instance_group": [{"count": 40}, {"count": 40}]}', "config.range", "add up"),
    ],
)
def test_impossible_configurations_are_refused_with_a_rule(text, rule, words):
    config, problems = parse_model_config(text)
    assert config is None
    assert rule in rules(problems), problems
    assert any(words in p.message for p in problems if p.rule == rule), problems
    assert all(p.file == "config" for p in problems)


def test_every_problem_is_reported_at_once():
    _, problems = parse_model_config('{"a": 1, "b": 2, "max_batch_size": "x"}')
    assert rules(problems) == ["config.type", "config.unknown_key", "config.unknown_key"]


def test_queue_policy_alone_needs_no_batch_dimension():
    config, problems = parse_model_config(
        {"dynamic_batching": {"default_queue_policy": {"max_queue_size": 2}}}
    )
    assert problems == []
    assert check_model_config(config, [meta(([2, 4], False))]) == []


def test_batching_needs_dynamic_tensors_with_room_for_max_batch_size():
    config, _ = parse_model_config({"max_batch_size": 8, "dynamic_batching": {}})
    assert check_model_config(config, [meta(([16, 4], True))]) == []
    static = check_model_config(config, [meta(([2, 4], False))])
    assert rules(static) == ["config.not_batchable"] * 2  # input and output
    assert "static shape [2, 4]" in static[0].message and "'forward' input 0" in static[0].message
    small = check_model_config(config, [meta(([4, 4], True))])
    assert rules(small) == ["config.max_batch_size"] * 2
    assert "upper bound 4" in small[0].message
    scalar = check_model_config(config, [meta(([16], True), outputs=[([], False)])])
    assert rules(scalar) == ["config.not_batchable"]
    assert "output 0" in scalar[0].message


def test_instance_group_count_overrides_the_servers_instances(tmp_path, linear_relu_program):
    import json

    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.config import Settings

    app = create_app(Settings(artifacts=tmp_path / "artifacts", grpc_port=0, instances_per_model=2))
    with TestClient(app) as client:
        for name, config in (("three", {"instance_group": [{"count": 3}]}), ("default", None)):
            fields = {"name": name, **({"config": json.dumps(config)} if config else {})}
            with open(linear_relu_program.pte, "rb") as pte:
                response = client.post(
                    "/models", data=fields, files={"program": ("m.pte", pte.read())}
                )
            assert response.status_code == 201, response.text
        served = app.state.service._models
        assert served["three"].pool.instance_count("forward") == 3
        assert served["default"].pool.instance_count("forward") == 2
