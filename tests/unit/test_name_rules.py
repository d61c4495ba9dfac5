import pytest

from service.ingest.name_rules import (
    check_data_name,
    check_data_names_together,
    check_model_name,
    check_program_name,
)


def rules(problems):
    return [p.rule for p in problems]


@pytest.mark.parametrize("name", ["engines.ptd", "ENGINES.PTD", "x.ptd. ", "x.Ptd...", "a.ptd . "])
def test_program_named_like_a_data_file_is_refused(name):
    problems = check_program_name(name)
    assert rules(problems) == ["program.ptd_name"]
    assert problems[0].file == name and "'.ptd'" in problems[0].message


@pytest.mark.parametrize("name", ["model.pte", "engines.ptd.pte", "ptd", "x.ptdx"])
def test_program_names_that_are_not_data_files_pass(name):
    assert check_program_name(name) == []


@pytest.mark.parametrize(
    "name",
    [
        "engines.ptd",
        "_default_external_constant.ptd",
        "a-b.c_d.ptd",
        "9lives.ptd",
        "x" * 251 + ".ptd",
        "console.ptd",
        "com10.ptd",
    ],
)
def test_good_data_names_pass(name):
    assert check_data_name(name) == []


def test_colon_is_told_about_the_colon_not_directories():
    problems = check_data_name("engines:v2.ptd")
    assert rules(problems) == ["data.characters"]
    assert "':'" in problems[0].message and "director" not in problems[0].message


def test_path_separator_is_told_it_is_a_path():
    problems = check_data_name("dir/engines.ptd")
    assert rules(problems) == ["data.characters"]
    assert "directory" in problems[0].message


@pytest.mark.parametrize(
    "name", ["my engines.ptd", "a+b.ptd", "caf\u00e9.ptd", "a?.ptd", "a\x01.ptd"]
)
def test_characters_outside_the_portable_set_are_refused(name):
    assert rules(check_data_name(name)) == ["data.characters"]


@pytest.mark.parametrize("name", ["-x.ptd", ".hidden.ptd"])
def test_first_character_rule(name):
    assert rules(check_data_name(name)) == ["data.first_character"]


@pytest.mark.parametrize("name", ["engines.PTD", "engines.ptd. ", "engines.bin", "engines"])
def test_data_name_must_end_in_lowercase_ptd(name):
    assert rules(check_data_name(name)) == ["data.extension"]


def test_empty_stem_is_refused():
    assert rules(check_data_name(".ptd")) == ["data.empty"]


@pytest.mark.parametrize("name", ["x.ptd.ptd", "x.PTD.ptd", "x.ptd..ptd"])
def test_stem_ending_in_ptd_is_refused(name):
    assert rules(check_data_name(name)) == ["data.double_suffix"]


@pytest.mark.parametrize(
    "name",
    [
        "CON.ptd",
        "con.ptd",
        "Prn.ptd",
        "aux.ptd",
        "NUL.ptd",
        "com1.ptd",
        "COM0.ptd",
        "lpt9.ptd",
        "LPT9.ptd",
        "com1.txt.ptd",
        "nul.tar.ptd",
    ],
)
def test_windows_device_names_are_refused_in_any_case_with_or_without_extension(name):
    problems = check_data_name(name)
    assert rules(problems) == ["data.device_name"]
    assert "device" in problems[0].message


def test_255_byte_limit_counts_the_suffix():
    assert check_data_name("x" * 251 + ".ptd") == []
    problems = check_data_name("x" * 252 + ".ptd")
    assert rules(problems) == ["data.too_long"] and "256 bytes" in problems[0].message


def test_every_problem_of_one_name_is_reported():
    assert set(rules(check_data_name("-con:" + "x" * 260 + ".ptd"))) == {
        "data.characters",
        "data.first_character",
        "data.too_long",
    }


def test_names_differing_only_in_case_collide():
    problems = check_data_names_together(["engines.ptd", "Engines.ptd", "other.ptd"])
    assert rules(problems) == ["data.case_collision"]
    assert "'engines.ptd'" in problems[0].message and "'Engines.ptd'" in problems[0].message


def test_same_name_twice_is_a_duplicate():
    assert rules(check_data_names_together(["a.ptd", "b.ptd", "a.ptd"])) == ["data.duplicate"]


@pytest.mark.parametrize("name", ["linear", "Model_1", "a.b-c", "_x", "9", "m" * 128])
def test_good_model_names(name):
    assert check_model_name(name) == []


@pytest.mark.parametrize(
    "name,rule",
    [
        ("", "model.empty"),
        ("my model", "model.characters"),
        ("a/b", "model.characters"),
        ("-x", "model.first_character"),
        ("CON", "model.device_name"),
        ("lpt1.v2", "model.device_name"),
        ("m" * 129, "model.too_long"),
        ("caf\u00e9", "model.characters"),
    ],
)
def test_bad_model_names(name, rule):
    problems = check_model_name(name)
    assert rules(problems) == [rule] and problems[0].file is None
