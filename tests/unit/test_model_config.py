"""Model configuration: Triton's names parsed, impossible values refused with a rule each."""

import pytest

from service.model_config.parse import check_model_config, parse_model_config, stored_config
from service.model_config.records import NO_CONFIG, ModelConfig
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
    assert config.to_json() == {
        "max_batch_size": 8,
        "dynamic_batching": {
            "max_queue_delay_microseconds": 0,
            "preferred_batch_size": [4, 8],
            "default_queue_policy": {"max_queue_size": 0, "default_timeout_microseconds": 0},
        },
        "instance_group": [{"count": 2}, {"count": 1}],
    }
    assert config.instances(5) == 3 and config.max_batch == 8 and config.merges
    assert config.queue.default_queue_policy.timeout_s is None
    assert stored_config(config.to_json()) == config  # the stored form parses to itself


def test_no_configuration_is_none_and_keeps_the_server_instances():
    assert parse_model_config(None) == (None, [])
    assert NO_CONFIG.instances(5) == 5 and parse_model_config({})[0].instances(5) == 5
    assert not NO_CONFIG.merges and NO_CONFIG.max_batch == 0 and NO_CONFIG.to_json() == {}
    # A section given is shown as given, even where it means the default.
    assert parse_model_config({"max_batch_size": 0})[0] == ModelConfig(max_batch_size=0)
    assert ModelConfig(max_batch_size=0).to_json() == {"max_batch_size": 0}


def test_a_stored_configuration_that_no_longer_parses_is_an_error_not_a_default():
    with pytest.raises(ValueError, match="max_batch_size"):
        stored_config({"max_batch_size": -1})


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

    from service.config import Settings
    from service.front.app import create_app

    app = create_app(Settings(artifacts=tmp_path / "artifacts", grpc_port=0, instances_per_model=2))
    with TestClient(app) as client:
        for name, config in (("three", {"instance_group": [{"count": 3}]}), ("default", None)):
            fields = {"name": name, **({"config": json.dumps(config)} if config else {})}
            with open(linear_relu_program.pte, "rb") as pte:
                response = client.post(
                    "/models", data=fields, files={"program": ("m.pte", pte.read())}
                )
            assert response.status_code == 201, response.text
        catalog = app.state.service._catalog
        assert catalog["three"].default().pool.instance_count("forward") == 3
        assert catalog["default"].default().pool.instance_count("forward") == 2


def warmup(name="w", batch_size=None, count=None, **inputs):
    sample = {"name": name, "inputs": inputs}
    if batch_size is not None:
        sample["batch_size"] = batch_size
    if count is not None:
        sample["count"] = count
    return sample


def zero(data_type="TYPE_FP32", dims=(4,)):
    return {"data_type": data_type, "dims": list(dims), "zero_data": True}


def test_a_warmup_is_normalized_with_every_field():
    random = {"data_type": "TYPE_FP32", "dims": [4], "random_data": True}
    config, problems = parse_model_config(
        {
            "max_batch_size": 8,
            "model_warmup": [
                warmup(input_0=zero()),
                warmup("r", batch_size=4, count=3, input_0=random),
            ],
        }
    )
    assert problems == []
    assert config.to_json()["model_warmup"] == [
        {"name": "w", "batch_size": 1, "inputs": {"input_0": zero()}, "count": 0},
        {"name": "r", "batch_size": 4, "inputs": {"input_0": random}, "count": 3},
    ]
    assert stored_config(config.to_json()) == config  # the stored form parses to itself
    assert config.warmups[1].inputs["input_0"].random and config.warmups[1].count == 3
    assert check_model_config(config, [meta(([8, 4], True))]) == []


@pytest.mark.parametrize(
    "warmups, rule, words",
    [
        ({"name": "w"}, "config.type", "list of objects"),
        ([warmup(input_0=zero()) | {"colour": 1}], "config.unknown_key", "colour"),
        ([warmup(input_0=zero() | {"shape": [4]})], "config.unknown_key", "shape"),
        ([warmup("", input_0=zero())], "config.type", "name"),
        ([warmup(7, input_0=zero())], "config.type", "name"),
        ([warmup(input_0=zero()), warmup(input_0=zero())], "config.warmup", "two warmups"),
        ([warmup(batch_size=9, input_0=zero())], "config.range", "warmup 'w'.batch_size"),
        ([warmup(batch_size=0, input_0=zero())], "config.range", "batch_size"),
        ([warmup(batch_size="2", input_0=zero())], "config.type", "batch_size"),
        ([warmup(count=-1, input_0=zero())], "config.range", "count"),
        ([warmup(count=10_000, input_0=zero())], "config.range", "count"),
        ([warmup()], "config.type", "inputs"),
        ([warmup(input_0=zero("FP32"))], "config.type", "TYPE_FP32"),
        ([warmup(input_0=zero(dims=[0]))], "config.range", "dims"),
        ([warmup(input_0=zero(dims=[-1]))], "config.range", "dims"),
        ([warmup(input_0=zero() | {"dims": 4})], "config.type", "dims"),
        ([warmup(input_0=zero() | {"random_data": True})], "config.warmup", "exactly one"),
        ([warmup(input_0={"data_type": "TYPE_FP32", "dims": [4]})], "config.warmup", "one of"),
        ([warmup(input_0=zero() | {"zero_data": "yes"})], "config.type", "must be true"),
        (
            [warmup(input_0={"data_type": "TYPE_FP32", "dims": [4], "input_data_file": "raw"})],
            "config.warmup_data_file",
            "warmup 'w' input 'input_0': input_data_file",
        ),
        ([warmup(input_0=zero(dims=[1 << 13, 1 << 12]))], "config.warmup", "elements"),
        ([warmup(str(i), input_0=zero()) for i in range(17)], "config.range", "at most 16"),
    ],
)
def test_impossible_warmups_are_refused_naming_the_warmup(warmups, rule, words):
    config, problems = parse_model_config({"max_batch_size": 8, "model_warmup": warmups})
    assert config is None
    assert rule in rules(problems), problems
    assert any(words in p.message for p in problems if p.rule == rule), problems


def test_a_warmup_that_does_not_fit_the_method_names_the_warmup_and_the_input():
    two = meta(([8, 4], True), ([8, 4], True))

    def check(max_batch, *samples, metas=(two,)):
        config, problems = parse_model_config(
            {"max_batch_size": max_batch, "model_warmup": list(samples)}
        )
        assert problems == []
        return check_model_config(config, list(metas))

    missing = check(8, warmup("only", input_0=zero()))
    assert rules(missing) == ["config.warmup"]
    assert "warmup 'only' gives no input 'input_1'" in missing[0].message
    unknown = check(8, warmup("x", input_0=zero(), input_1=zero(), extra=zero()))
    assert "warmup 'x' input 'extra' is unknown" in unknown[0].message
    typed = check(8, warmup("t", input_0=zero("TYPE_INT64"), input_1=zero()))
    assert "warmup 't' input 'input_0' is TYPE_INT64; the method takes TYPE_FP32" in (
        typed[0].message
    )
    # batch_size joins dims in front when the model batches; the bound is the program's.
    wide = check(8, warmup("b", batch_size=8, input_0=zero(dims=[5]), input_1=zero()))
    assert "warmup 'b' input 'input_0' has the shape [8, 5]" in wide[0].message
    static = meta(([2, 4], False))
    assert check(0, warmup("s", input_0=zero(dims=[2, 4])), metas=(static,)) == []
    shaped = check(0, warmup("s", input_0=zero(dims=[3, 4])), metas=(static,))
    assert "has the shape [3, 4] (dims); the method takes exactly [2, 4]" in shaped[0].message
    other = check(
        0, warmup("m", input_0=zero(dims=[2, 4])), metas=(meta(([2, 4], False), name="encode"),)
    )
    assert "no method 'forward'" in other[0].message


def test_priority_levels_are_normalized_with_a_policy_per_level():
    config, problems = parse_model_config(
        {
            "dynamic_batching": {
                "priority_levels": 3,
                "priority_queue_policy": {
                    "1": {"max_queue_size": 4, "timeout_action": "DELAY"},
                    "3": {"default_timeout_microseconds": 500},
                },
            }
        }
    )
    assert problems == []
    batching = config.to_json()["dynamic_batching"]
    assert (batching["priority_levels"], batching["default_priority_level"]) == (3, 3)
    assert batching["priority_queue_policy"] == {
        "1": {"max_queue_size": 4, "default_timeout_microseconds": 0, "timeout_action": "DELAY"},
        "3": {"max_queue_size": 0, "default_timeout_microseconds": 500, "timeout_action": "REJECT"},
    }
    assert stored_config(config.to_json()) == config
    levels = config.queue
    assert levels.policy_of(1).delays and levels.policy_of(1).max_queue_size == 4
    assert levels.policy_of(2) == levels.default_queue_policy  # a level without its own
    assert levels.policy_of(3).timeout_s == 0.0005 and not levels.policy_of(3).delays
    plain, _ = parse_model_config({"dynamic_batching": {}})
    assert "priority_levels" not in plain.to_json()["dynamic_batching"]  # no levels, no fields


@pytest.mark.parametrize(
    "batching, rule, words",
    [
        ({"priority_levels": -1}, "config.range", "priority_levels"),
        ({"priority_levels": 65}, "config.range", "priority_levels"),
        ({"priority_levels": "2"}, "config.type", "priority_levels"),
        ({"default_priority_level": 1}, "config.priority", "needs dynamic_batching.priority_lev"),
        ({"priority_queue_policy": {}}, "config.priority", "priority_queue_policy needs"),
        ({"priority_levels": 2, "default_priority_level": 3}, "config.range", "default_priority"),
        ({"priority_levels": 2, "default_priority_level": 0}, "config.range", "default_priority"),
        ({"priority_levels": 2, "priority_queue_policy": []}, "config.type", "level -> policy"),
        ({"priority_levels": 2, "priority_queue_policy": {"3": {}}}, "config.priority", "1 to"),
        ({"priority_levels": 2, "priority_queue_policy": {"x": {}}}, "config.priority", "1 to"),
        (
            {"priority_levels": 2, "priority_queue_policy": {"1": {"size": 1}}},
            "config.unknown_key",
            "priority_queue_policy['1'].size",
        ),
        (
            {"priority_levels": 2, "priority_queue_policy": {"1": {"timeout_action": "DROP"}}},
            "config.type",
            "REJECT or DELAY",
        ),
        (
            {"priority_levels": 2, "priority_queue_policy": {"2": {"max_queue_size": -1}}},
            "config.range",
            "max_queue_size",
        ),
    ],
)
def test_impossible_priorities_are_refused_with_a_rule(batching, rule, words):
    config, problems = parse_model_config({"dynamic_batching": batching})
    assert config is None
    assert rule in rules(problems), problems
    assert any(words in p.message for p in problems if p.rule == rule), problems
