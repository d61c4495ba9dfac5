"""Code checks run by the same test command as everything else.

The C++ unit tests (runtime_ext/tests/, plain asserts under CTest: blob parser, JSON reader,
staging plan, engine runner and backend over a fake engine, the host's arenas and tensor I/O),
the clang-format check of runtime_ext/ and ruff's lint and format checks of the
Python (configured in pyproject.toml) are part of the suite, so the one test command in the
README covers both languages and CI runs exactly that command.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from support.unit_programs import arena_programs

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    assert path, f"{name} is not installed: run `bash .ci/install --test`"
    return str(path)


def _run(command: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_runtime_ext_is_clang_formatted():
    sources = sorted(
        str(p.relative_to(REPO))
        for p in (REPO / "runtime_ext").rglob("*")
        if p.suffix in (".h", ".cpp")
    )
    assert sources
    result = _run([_tool("clang-format"), "--dry-run", "--Werror", *sources])
    assert result.returncode == 0, result.stderr[-4000:]


def test_python_passes_ruff_lint_and_format():
    lint = _run([_tool("ruff"), "check", "service", "tests", "bench"])
    assert lint.returncode == 0, lint.stdout[-4000:] + lint.stderr[-2000:]
    formatted = _run([_tool("ruff"), "format", "--check", "service", "tests", "bench"])
    assert formatted.returncode == 0, formatted.stdout[-4000:] + formatted.stderr[-2000:]


def test_cpp_unit_tests_pass_under_ctest(tmp_path, programs_dir):
    programs = arena_programs(programs_dir, tmp_path / "arena_programs")
    build = REPO / "build" / "unit"
    configure = _run(
        [
            _tool("cmake"),
            "-S",
            "runtime_ext",
            "-B",
            str(build),
            "-G",
            "Ninja",
            "-DETHOST_UNIT_TESTS=ON",
            f"-DPython_EXECUTABLE={sys.executable}",
        ]
    )
    assert configure.returncode == 0, configure.stderr[-4000:]
    built = _run([_tool("cmake"), "--build", str(build), "--target", "ethost_unit_tests"])
    assert built.returncode == 0, (built.stdout + built.stderr)[-4000:]
    tested = subprocess.run(
        [_tool("ctest"), "--test-dir", str(build), "--output-on-failure"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "ETHOST_TEST_PROGRAMS": str(programs)},
    )
    assert tested.returncode == 0, tested.stdout[-4000:]
    assert "100% tests passed" in tested.stdout, tested.stdout[-4000:]
    tests = ("engine_runner_test", "backend_test", "arenas_test", "tensor_io_test")
    others = ("device_inputs_test", "plan_reader_test", "execute_registry_test", "lane_test")
    others += ("lane_shm_test", "grpc_infer_test")
    for name in (*tests, *others, "front_test"):
        assert f" {name} " in tested.stdout, f"{name} did not run"
