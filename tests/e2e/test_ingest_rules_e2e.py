"""One refused upload per ingest rule, over HTTP: the exact rule id, and nothing left behind."""

import pytest

from support.foreign_delegate import export_xnnpack_linear
from support.program_fixtures import (
    external_weights_program,
    linear_relu_program,  # noqa: F401
    split_weights_program,
)
from support.server import registry_rows, stored_files, upload


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from support.server import ServerProcess

    started = ServerProcess(tmp_path_factory.mktemp("rules") / "artifacts").start()
    yield started
    started.stop()


def refused(server, *args, **kwargs):
    """Uploads, expects 422, checks the artifacts root holds only the registry; returns problems."""
    with server.client() as client:
        response = upload(client, *args, **kwargs)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] and body["problems"]
    assert stored_files(server.artifacts) == ["registry.sqlite3"]
    assert registry_rows(server.artifacts) == []
    return body["problems"]


def only_rule(problems):
    assert len(problems) == 1, problems
    return problems[0]


@pytest.mark.parametrize("program_name", ["engines.ptd", "ENGINES.PTD", "x.ptd. "])
def test_program_named_like_a_data_file(server, linear_relu_program, program_name):
    problem = only_rule(refused(server, "m", linear_relu_program.pte, program_name=program_name))
    assert problem["rule"] == "program.ptd_name" and problem["file"] == program_name


def test_program_that_is_not_a_program(server):
    problem = only_rule(refused(server, "m", b"\x00" * 64))
    assert problem["rule"] == "program.invalid" and problem["file"] == "model.pte"


def test_program_that_fails_to_load_in_the_child(start_server, programs_dir):
    # A delegate whose backend this server does not serve: only loading the method finds it.
    problem = only_rule(
        refused(start_server("--backends", "tensorrt"), "m", export_xnnpack_linear(programs_dir))
    )
    assert problem["rule"] == "program.load_failed" and "XnnpackBackend" in problem["message"]


@pytest.mark.parametrize(
    "data_name,rule,fragment",
    [
        ("engines.bin", "data.extension", ".ptd"),
        ("engines:v2.ptd", "data.characters", "':'"),
        ("-engines.ptd", "data.first_character", "start"),
        ("com1.txt.ptd", "data.device_name", "COM1"),
        ("LPT9.ptd", "data.device_name", "LPT9"),
        ("x.ptd.ptd", "data.double_suffix", "once"),
        ("x" * 252 + ".ptd", "data.too_long", "255"),
        (".ptd", "data.empty", "empty"),
    ],
)
def test_data_file_name_rules(server, external_weights_program, data_name, rule, fragment):
    [weights] = external_weights_program.ptds
    problems = refused(server, "m", external_weights_program.pte, [(data_name, weights)])
    problem = only_rule(problems)
    assert problem["rule"] == rule and problem["file"] == data_name
    assert fragment in problem["message"]
    if rule == "data.characters":
        assert "director" not in problem["message"]


def test_data_names_differing_only_in_case(server, split_weights_program):
    first, second = split_weights_program.ptds
    problem = only_rule(
        refused(
            server,
            "m",
            split_weights_program.pte,
            [("weights.ptd", first), ("WEIGHTS.ptd", second)],
        )
    )
    assert problem["rule"] == "data.case_collision" and problem["file"] == "WEIGHTS.ptd"


def test_same_data_file_twice(server, external_weights_program):
    [weights] = external_weights_program.ptds
    problem = only_rule(refused(server, "m", external_weights_program.pte, [weights, weights]))
    assert problem["rule"] == "data.duplicate" and problem["file"] == weights.name


def test_data_file_that_is_not_a_data_file(server, external_weights_program):
    problems = refused(
        server,
        "m",
        external_weights_program.pte,
        [external_weights_program.ptds[0], ("other.ptd", b"garbage" * 10)],
    )
    problem = only_rule(problems)
    assert problem["rule"] == "data.invalid" and problem["file"] == "other.ptd"


def test_missing_external_data_names_keys_and_method(server, split_weights_program):
    first = next(p for p in split_weights_program.ptds if p.name.startswith("first"))
    problem = only_rule(refused(server, "m", split_weights_program.pte, [first]))
    assert problem["rule"] == "external.missing_key"
    assert "'forward'" in problem["message"] and "second.weight" in problem["message"]
    assert "first.weight" not in problem["message"]


@pytest.mark.parametrize(
    "name,rule",
    [
        ("my model", "model.characters"),
        ("-m", "model.first_character"),
        ("CON", "model.device_name"),
        ("m" * 129, "model.too_long"),
        ("", "model.empty"),
    ],
)
def test_model_name_rules(server, linear_relu_program, name, rule):
    problem = only_rule(refused(server, name, linear_relu_program.pte))
    assert problem["rule"] == rule and problem["file"] is None


@pytest.mark.parametrize(
    "kwargs,rule",
    [
        ({"name": None, "program": b"x"}, "upload.name_missing"),
        ({"name": "m", "program": b"x", "fields": {"colour": "red"}}, "upload.unknown_field"),
        ({"name": "m", "program": b"x", "fields": {"replace": "maybe"}}, "upload.replace"),
    ],
)
def test_malformed_form(server, kwargs, rule):
    assert only_rule(refused(server, **kwargs))["rule"] == rule


def test_replace_takes_the_boolean_words_its_refusal_lists(start_server, linear_relu_program):
    """'yes' is taken, so the refusal of 'maybe' lists every word taken, not only true/false."""
    server = start_server()
    problem = only_rule(refused(server, "m", b"x", fields={"replace": "maybe"}))
    assert "true/false, 1/0, yes/no, on/off" in problem["message"], problem
    assert "'maybe'" in problem["message"], problem
    with server.client() as client:
        assert upload(client, "words", linear_relu_program.pte).status_code == 201
        again = upload(client, "words", linear_relu_program.pte, fields={"replace": "yes"})
    assert again.status_code == 201, again.text


def test_program_missing(server, external_weights_program):
    problem = only_rule(refused(server, "m", None, external_weights_program.ptds))
    assert problem["rule"] == "upload.program_missing"


def test_not_multipart(server):
    with server.client() as client:
        response = client.post("/models", json={"name": "m"})
    assert response.status_code == 422
    assert only_rule(response.json()["problems"])["rule"] == "upload.content_type"


def test_every_problem_is_reported_together(server, external_weights_program):
    problems = refused(
        server,
        "bad name",
        external_weights_program.pte,
        [("engines:v2.ptd", b"junk"), ("CON.ptd", b"junk")],
        program_name="ENGINES.PTD",
    )
    assert {p["rule"] for p in problems} >= {
        "model.characters",
        "program.ptd_name",
        "data.characters",
        "data.device_name",
    }


def test_unused_data_file_is_a_warning_not_a_refusal(
    start_server, linear_relu_program, external_weights_program
):
    server = start_server()
    with server.client() as client:
        response = upload(client, "m", linear_relu_program.pte, external_weights_program.ptds)
    assert response.status_code == 201, response.text
    [warning] = response.json()["warnings"]
    assert "_default_external_constant.ptd" in warning and "not used" in warning


def test_crashing_load_check_refuses_and_the_server_survives(start_server, linear_relu_program):
    server = start_server("--backend-setup", "support.load_check_faults:abort_in_load_check")
    problem = only_rule(refused(server, "m", linear_relu_program.pte))
    assert problem["rule"] == "program.load_crashed" and "SIGABRT" in problem["message"]
    with server.client() as client:
        assert client.get("/health/ready").status_code == 200


def test_hanging_load_check_times_out(start_server, linear_relu_program):
    server = start_server(
        "--backend-setup",
        "support.load_check_faults:hang_in_load_check",
        "--load-check-timeout",
        "2",
    )
    problem = only_rule(refused(server, "m", linear_relu_program.pte))
    assert problem["rule"] == "program.load_timeout"


def test_program_from_a_newer_executorch_names_both_versions(server, linear_relu_program):
    data = bytearray(linear_relu_program.pte.read_bytes())
    data[4:8] = b"ET13"
    problem = only_rule(refused(server, "m", bytes(data)))
    assert problem["rule"] == "program.schema" and problem["file"] == "model.pte"
    assert "written by a newer ExecuTorch: its schema identifier is ET13" in problem["message"]
    assert "reads ET12 only" in problem["message"]
