"""Shared test setup: helpers under tests/support are importable as `support.*`."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def programs_dir(tmp_path_factory) -> Path:
    """One folder per test session for programs exported by the fixtures (never committed).

    ETRT_TEST_PROGRAMS_DIR names a folder to keep them in instead: the GPU machine's torch cannot
    run executorch's exporter, so programs exported here travel there in that folder.
    """
    kept = os.environ.get("ETRT_TEST_PROGRAMS_DIR")
    if kept:
        Path(kept).mkdir(parents=True, exist_ok=True)
        return Path(kept)
    return tmp_path_factory.mktemp("programs")


def pytest_collection_modifyitems(config, items):
    """Marks `slow` every test that exports programs (it takes the programs_dir fixture, directly
    or through another): torch's exporter costs seconds per program on a small machine. With the
    `e2e` mark (tests/e2e/conftest.py) and the modules marked `slow` themselves, this is what the
    quick lane, `pytest -m "not e2e and not slow"`, leaves out."""
    for item in items:
        if "programs_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def backend_setups_reapplied():
    """Unit tests swap the TensorRT delegate's process-wide provider and memory mode directly
    (and put None back); an in-process engine after them must get its backend setup applied
    again rather than trust that what import_host applied earlier is still in place."""
    yield
    from service import native_host

    native_host._applied = ()
