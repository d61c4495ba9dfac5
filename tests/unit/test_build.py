"""The native build refuses an executorch other than the pinned release (ExecuTorch has no
stable C++ ABI), with a message that says what to install."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# slow (left out of the quick lane, docs/development.md): configures the native build with CMake
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def configure(build_dir: Path, *defines: str) -> subprocess.CompletedProcess:
    cmake = shutil.which("cmake", path=str(Path(sys.executable).parent)) or shutil.which("cmake")
    assert cmake, "cmake is installed by .ci/install"
    return subprocess.run(
        [
            cmake,
            "-S",
            str(ROOT / "runtime_ext"),
            "-B",
            str(build_dir),
            f"-DPython_EXECUTABLE={sys.executable}",
            *defines,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_different_executorch_release_is_refused_by_name(tmp_path):
    # Emulates building against executorch 1.5.1 sources that require another release: the
    # installed 1.5.1 must be refused with both versions and the fix named.
    result = configure(tmp_path, "-DETHOST_EXECUTORCH_VERSION=1.4.0")
    assert result.returncode != 0
    message = " ".join((result.stdout + result.stderr).split())
    assert "executorch 1.5.1" in message and "executorch==1.4.0" in message, message
    assert "no stable C++ ABI" in message
    assert "pip install executorch==1.4.0" in message


def test_the_pinned_release_configures(tmp_path):
    result = configure(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "executorch 1.5.1" in result.stdout
