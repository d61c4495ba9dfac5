from pathlib import Path

import pytest

from service.backends.registry import KNOWN, setups
from service.config import BACKEND_NAMES, parse_settings


def test_defaults_match_the_documented_ones():
    settings = parse_settings([], {})
    assert (settings.host, settings.port, settings.artifacts) == (
        "127.0.0.1",
        8000,
        Path("artifacts"),
    )
    assert settings.grpc_port == 8001
    assert settings.allow_unverified_plans is False
    assert settings.backends == ("tensorrt", "xnnpack") and settings.backend_setup is None
    assert setups(settings) == (
        "service.backends.tensorrt.runtime:install_backend",
        "service.backends.xnnpack:install_backend",
    )
    assert settings.access_log is False
    assert (settings.max_json_bytes, settings.inline_execute_us) == (64 * 1024 * 1024, 100.0)


def test_speed_settings_from_flags_and_environment():
    settings = parse_settings(
        ["--access-log", "--max-json-bytes", "1000"], {"ETRT_INLINE_EXECUTE_US": "0"}
    )
    assert (settings.access_log, settings.max_json_bytes, settings.inline_execute_us) == (
        True,
        1000,
        0.0,
    )


def test_backends_pick_the_setups_and_unknown_ones_are_refused(capsys):
    assert setups(parse_settings(["--backends", "xnnpack"], {})) == (
        "service.backends.xnnpack:install_backend",
    )
    assert setups(parse_settings([], {"ETRT_BACKENDS": ""})) == ()
    with pytest.raises(SystemExit):
        parse_settings(["--backends", "tensorrt,cuda"], {})
    assert "unknown backend(s) cuda" in capsys.readouterr().err


def test_the_settings_name_exactly_the_registered_backends():
    """config knows the backends by name only; the registry holds those very ones."""
    assert tuple(KNOWN) == BACKEND_NAMES


@pytest.mark.parametrize(
    "argv,allowed",
    [(["--allow-unverified-plans"], True), (["--allow-unverified-plans", "false"], False)],
)
def test_a_boolean_flag_alone_means_true(argv, allowed):
    assert parse_settings(argv, {}).allow_unverified_plans is allowed


def test_an_empty_backend_setup_registers_no_backend():
    assert setups(parse_settings(["--backend-setup", ""], {})) == ()


def test_knatives_port_comes_between_the_flag_and_etrt_port(capsys):
    both = {"PORT": "8080", "ETRT_PORT": "8000"}
    assert parse_settings([], both).port == 8080
    assert parse_settings(["--port", "9100"], both).port == 9100
    assert parse_settings([], {"ETRT_PORT": "8000"}).port == 8000
    assert parse_settings([], {"PORT": "8080"}).port == 8080
    with pytest.raises(SystemExit):
        parse_settings([], {"PORT": "http"})
    assert "PORT='http'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_settings([], {"PORT": "70000"})
    assert "--port must be a TCP port" in capsys.readouterr().err


def test_one_port_and_the_shutdown_grace(capsys):
    settings = parse_settings([], {})
    assert settings.one_port is False and settings.shutdown_grace_s == 25.0
    settings = parse_settings(["--one-port", "--shutdown-grace", "5"], {})
    assert settings.one_port is True and settings.shutdown_grace_s == 5.0
    assert parse_settings([], {"ETRT_ONE_PORT": "yes"}).one_port is True
    with pytest.raises(SystemExit):
        parse_settings(["--shutdown-grace", "0"], {})
    assert "--shutdown-grace must be positive" in capsys.readouterr().err


def test_environment_sets_and_flags_override():
    env = {
        "ETRT_HOST": "0.0.0.0",
        "ETRT_PORT": "9000",
        "ETRT_ARTIFACTS": "/data",
        "ETRT_INSTANCES": "4",
        "ETRT_ALLOW_UNVERIFIED_PLANS": "yes",
        "ETRT_BACKEND_SETUP": "a:b, c:d",
        "ETRT_LOAD_CHECK_TIMEOUT": "2.5",
    }
    settings = parse_settings(["--port", "9100"], env)
    assert settings.host == "0.0.0.0" and settings.port == 9100
    assert settings.artifacts == Path("/data") and settings.instances_per_model == 4
    assert settings.allow_unverified_plans is True and settings.backend_setup == ("a:b", "c:d")
    assert settings.load_check_timeout_s == 2.5


def test_grpc_port_from_environment_or_flag_and_zero_turns_grpc_off():
    assert parse_settings([], {"ETRT_GRPC_PORT": "9001"}).grpc_port == 9001
    assert parse_settings(["--grpc-port", "0"], {"ETRT_GRPC_PORT": "9001"}).grpc_port == 0


@pytest.mark.parametrize(
    "argv,env",
    [
        ([], {"ETRT_PORT": "http"}),
        (["--instances", "0"], {}),
        ([], {"ETRT_ALLOW_UNVERIFIED_PLANS": "perhaps"}),
        (["--max-upload-bytes", "-1"], {}),
        (["--grpc-port", "-1"], {}),
        ([], {"ETRT_GRPC_PORT": "65536"}),
        (["--max-json-bytes", "0"], {}),
        (["--inline-execute-us", "-1"], {}),
    ],
)
def test_bad_values_exit_with_a_usage_error(argv, env, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_settings(argv, env)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err  # one line naming the setting, no usage block
    assert err.startswith("error: ") and err.count("\n") == 1 and "usage:" not in err, err


@pytest.mark.parametrize(
    "text,size",
    [
        ("536870912", 512 * 2**20),
        ("512M", 512 * 2**20),
        ("512MiB", 512 * 2**20),
        ("1G", 2**30),
        ("1g", 2**30),
        ("64k", 64 * 1024),
        ("2T", 2 * 2**40),
        ("100B", 100),
    ],
)
def test_sizes_take_units(text, size):
    settings = parse_settings(["--arena-bytes", text], {"ETRT_MAX_JSON_BYTES": text})
    assert settings.arena_bytes == settings.max_json_bytes == size


def test_a_size_with_an_unknown_unit_is_named(capsys):
    with pytest.raises(SystemExit):
        parse_settings(["--max-data-bytes", "1X"], {})
    err = capsys.readouterr().err
    assert "--max-data-bytes" in err and "'1X'" in err and "512M, 1G" in err


def test_a_bad_log_level_is_one_line_naming_the_levels(capsys):
    with pytest.raises(SystemExit):
        parse_settings([], {"ETRT_LOG_LEVEL": "loud"})
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ETRT_LOG_LEVEL='loud'" in err
    assert "critical, error, warning, info, debug" in err
    assert parse_settings(["--log-level", "DEBUG"], {}).log_level == "debug"


def test_help_shows_every_default_from_the_settings(capsys):
    with pytest.raises(SystemExit):
        parse_settings(["--help"], {})
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for expected in (
        "default: 512M; env ETRT_ARENA_BYTES",
        "default: 8000; env ETRT_PORT",
        "default: 2G; env ETRT_MAX_PROGRAM_BYTES",
        "default: info; env ETRT_LOG_LEVEL",
        "default: false; env ETRT_ACCESS_LOG",
        "default: tensorrt,xnnpack",
        "default: artifacts; env ETRT_ARTIFACTS",
        "default: 100; env ETRT_INLINE",
    ):
        assert expected in shown, expected
    assert shown.count("(default: ") == shown.count("; env ETRT_")


def test_the_boolean_words_a_refusal_lists_are_the_ones_taken():
    from service.config import BOOLEAN_WORDS, FALSE_WORDS, TRUE_WORDS

    listed = {word for pair in BOOLEAN_WORDS.split(", ") for word in pair.split("/")}
    assert listed == (TRUE_WORDS | FALSE_WORDS) - {""}


def test_the_fronts_priority_below_the_engines_is_a_setting_within_nices_range(capsys):
    assert parse_settings([], {}).front_nice == 5
    assert parse_settings([], {"ETRT_FRONT_NICE": "0"}).front_nice == 0
    assert parse_settings(["--front-nice", "19"], {}).front_nice == 19
    for wrong in ("-1", "20"):
        with pytest.raises(SystemExit):
            parse_settings(["--front-nice", wrong], {})
        assert "--front-nice must be between 0 and 19" in capsys.readouterr().err


def test_the_docs_table_lists_every_flag_and_variable_the_code_takes():
    """docs/configuration.md's table against service/config.py's options, both ways."""
    import re

    from service.config import _OPTIONS

    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    rows = set(re.findall(r"^\| (`--[a-z-]+`|\(none\)) \| `(ETRT_[A-Z_]+)`", page, re.M))
    documented = {(flag.strip("`"), env) for flag, env in rows if flag != "(none)"}
    assert documented == {(flag, env) for flag, env, _, _, _ in _OPTIONS}
