"""`.ci/install` stops before installing anything, with one line naming what is missing."""

import subprocess
import sys

import pytest

from support.server import REPO

OLD_PYTHON = """#!/bin/sh
case "$*" in
  *platform*) echo 3.9.1 ;;
  *) exit 1 ;;
esac
"""
# A real interpreter whose headers are not where it says they are.
NO_HEADERS = f"""#!/bin/sh
case "$*" in
  *sysconfig*) echo /nonexistent/include ;;
  *) exec {sys.executable} "$@" ;;
esac
"""


def _install(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", ".ci/install"],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "setup,expected",
    [
        (lambda tmp: {"PYTHON": str(tmp / "absent")}, "error: no Python interpreter"),
        (lambda tmp: {"PYTHON": _script(tmp, OLD_PYTHON)}, "error: Python >= 3.10 is needed"),
        (lambda tmp: {"PYTHON": _script(tmp, NO_HEADERS)}, "error: no Python headers"),
        (
            lambda tmp: {"PYTHON": sys.executable, "CXX": "/bin/false"},
            "error: /bin/false cannot compile C++17",
        ),
    ],
)
def test_a_missing_prerequisite_is_one_line(tmp_path, setup, expected):
    done = _install(setup(tmp_path))
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), done.stderr
    assert "==>" not in done.stdout  # nothing was installed


def _script(tmp_path, text: str) -> str:
    path = tmp_path / "python"
    path.write_text(text)
    path.chmod(0o755)
    return str(path)
