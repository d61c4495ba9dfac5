"""Request parameters as the gRPC handlers read them: Triton's `timeout` (microseconds) against
the call's deadline, and a repository load's file overrides and configuration."""

import pytest

from service.errors import Invalid
from service.front.protocols.v2_grpc.servicer import _load_parameters, _timeout_s


@pytest.mark.parametrize(
    "parameters, remaining, expected",
    [
        ({}, None, None),
        ({"timeout": 0}, None, None),  # 0: no limit, as Triton reads it
        ({"timeout": 2_500_000}, None, 2.5),
        ({"timeout": 2_500_000}, 1.0, 1.0),  # the call's deadline comes first
        ({"timeout": 500_000}, 1.0, 0.5),
        ({}, 3.0, 3.0),
    ],
)
def test_the_sooner_of_timeout_and_deadline_limits_the_wait(parameters, remaining, expected):
    parameters = {**parameters, "other": "kept"}
    assert _timeout_s(parameters, remaining) == expected
    assert parameters == {"other": "kept"}


@pytest.mark.parametrize("value", [-1, "10", 1.5, True])
def test_a_timeout_must_be_non_negative_microseconds(value):
    with pytest.raises(Invalid, match="timeout"):
        _timeout_s({"timeout": value}, None)


def test_load_parameters_give_files_by_version_path_and_the_config():
    files, config = _load_parameters(
        {"file:1/model.pte": b"p", "file:1/w.ptd": b"d", "config": '{"max_batch_size": 4}'}
    )
    assert files == {"1/model.pte": b"p", "1/w.ptd": b"d"}
    assert config == {"max_batch_size": 4}
    assert _load_parameters({}) == (None, None)


@pytest.mark.parametrize(
    "parameters, rule",
    [
        ({"config": "{"}, "repository.config"),
        ({"config": "[1]"}, "repository.config"),
        ({"config": 3}, "repository.config"),
        ({"file:1/model.pte": "text"}, "repository.file"),
        ({"colour": "red"}, "repository.parameter"),
    ],
)
def test_bad_load_parameters_name_the_rule(parameters, rule):
    with pytest.raises(Invalid) as refused:
        _load_parameters(parameters)
    assert [p.rule for p in refused.value.problems] == [rule]
