"""The runtime versions reported in server metadata, read without importing TensorRT.

TensorRT is not installed on CI hosts, so a TensorRT runtime module is made by hand in a
temporary sys.path entry, as pip would lay it out: a package, and (where said) its
distribution's dist-info record.
"""

import importlib
import sys
from importlib import metadata

import pytest

from service.backends import versions
from service.backends.tensorrt import runtime as tensorrt_runtime

MODULE = "tensorrt_lean_bindings"


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A fresh sys.path entry; version caches are cleared before and after."""

    def clear():
        versions._installed_tensorrt_version.cache_clear()
        tensorrt_runtime._tensorrt.cache_clear()
        sys.modules.pop(MODULE, None)

    clear()
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    monkeypatch.undo()
    clear()
    importlib.invalidate_caches()


def _package(site, source, distribution_version=None):
    (site / MODULE).mkdir()
    (site / MODULE / "__init__.py").write_text(source)
    if distribution_version:
        info = site / f"tensorrt_lean_cu13_bindings-{distribution_version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: tensorrt_lean_cu13_bindings\n"
            f"Version: {distribution_version}\n"
        )
        (info / "RECORD").write_text(f"{MODULE}/__init__.py,,\n")
    importlib.invalidate_caches()


def test_executorch_is_the_installed_distribution():
    assert versions.runtime_versions()["executorch"] == metadata.version("executorch")


def test_tensorrt_is_reported_exactly_when_the_runtime_finds_a_module():
    reported = versions.runtime_versions().get("tensorrt")
    assert reported == tensorrt_runtime.tensorrt_version()


def test_an_installed_tensorrt_is_read_from_its_distribution_without_importing_it(site):
    _package(site, "raise ImportError('imported')\n", distribution_version="11.4.0.106")
    assert versions.runtime_versions()["tensorrt"] == "11.4.0.106"
    assert MODULE not in sys.modules


def test_an_imported_tensorrt_reports_its_own_version_and_an_unrecorded_one_is_left_out(site):
    _package(site, "__version__ = '11.4.0.106'\n")
    assert "tensorrt" not in versions.runtime_versions()  # importable, but no record: no guess
    assert tensorrt_runtime.tensorrt_version() == "11.4.0.106"  # the runtime imports it
    assert versions.runtime_versions()["tensorrt"] == "11.4.0.106"


def test_a_broken_distribution_record_does_not_fail_metadata(site):
    _package(site, "raise ImportError('imported')\n", distribution_version="11.4.0.106")
    (next(site.glob("*.dist-info")) / "METADATA").write_text("not metadata at all")
    assert set(versions.runtime_versions()) == {"executorch"}
