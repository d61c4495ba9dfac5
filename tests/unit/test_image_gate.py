"""docker/tensorrt_gate.py, the image's first build step, run as the build runs it: a script on a
Python that has (or lacks) a TensorRT module. Its module list is the server's."""

from __future__ import annotations

import subprocess
import sys

from service.backends.tensorrt.runtime import MODULE_CANDIDATES
from support.server import REPO

GATE = REPO / "docker" / "tensorrt_gate.py"


def _gate(tmp_path, wanted: str, modules: dict[str, str]) -> subprocess.CompletedProcess:
    """The gate with only `modules` (name -> __init__ text) importable beyond the stdlib: -S
    leaves site-packages out, so a TensorRT installed on this machine cannot leak in."""
    for name, text in modules.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(text)
    return subprocess.run(
        [sys.executable, "-S", str(GATE), wanted],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_gate_tries_the_modules_the_server_imports_in_its_order():
    namespace: dict = {}
    exec(compile(GATE.read_text(), str(GATE), "exec"), namespace)
    assert namespace["MODULE_CANDIDATES"] == MODULE_CANDIDATES


def test_no_tensorrt_module_is_one_line_naming_the_modules_and_the_fix(tmp_path):
    done = _gate(tmp_path, "11.1", {})
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("error: this base image has no TensorRT Python module (tensorrt, ")
    assert "ETRT_TENSORRT_VERSION=11.1" in line
    assert "--build-arg BASE_IMAGE=nvcr.io/nvidia/tensorrt:26.07-py3" in line
    assert "leave ETRT_TENSORRT_VERSION empty for a CPU image" in line


def test_a_matching_release_passes_and_another_is_named(tmp_path):
    lean = {"tensorrt_lean": "__version__ = '11.1.0.106'\n"}
    assert _gate(tmp_path, "11.1", lean).returncode == 0
    refused = _gate(tmp_path, "10.3", {})
    assert refused.returncode == 1
    [line] = refused.stderr.splitlines()
    assert line.startswith("error: this base image has TensorRT 11.1.0.106, not 10.3: pick the NGC")


def test_a_module_that_is_there_but_broken_is_not_called_missing(tmp_path):
    done = _gate(tmp_path, "11.1", {"tensorrt": "import libnvinfer_missing_here\n"})
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("error: the base image's tensorrt module cannot be imported:")
    assert "libnvinfer_missing_here" in line


def test_a_cpu_image_checks_nothing(tmp_path):
    done = _gate(tmp_path, "", {})
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
