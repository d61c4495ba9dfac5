"""The container lane: docker/Dockerfile and docker-compose.yml built and run with podman.

Every test here is marked `containers` (CI runs them from .ci/run: `pytest -q tests/containers`).
Where podman, buildah or runc is not installed, they are skipped with the reason; once an engine
is installed, any failure to build or run is a failure.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from support import containers
from support.server import REPO

CPU_TAG = "localhost/etrt-test/etrt-server:cpu"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "arm64: the arm64 image under emulation (test_arm64_image.py; .ci/run times it)"
    )


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/containers/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.containers)


@dataclass
class BuiltImage:
    tag: str
    base: str
    log: str


@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    missing = containers.missing_tools()
    if missing:
        pytest.skip(
            f"no container engine here ({', '.join(missing)} not installed): "
            f"{containers.INSTALL_HINT}"
        )
    engine = containers.engine(tmp_path_factory.mktemp("podman"), dict(os.environ))
    yield engine
    engine.remove_started()


@pytest.fixture(scope="session")
def cpu_image(engine) -> BuiltImage:
    """The CPU image exactly as the README builds it, on python:3.11-slim or its stand-in."""
    base = containers.python_base(engine)
    done = engine.build(CPU_TAG, REPO / "docker" / "Dockerfile", REPO, BASE_IMAGE=base)
    assert done.returncode == 0, f"the CPU image did not build:\n{done.stderr[-6000:]}"
    return BuiltImage(CPU_TAG, base, done.stdout + done.stderr)


@pytest.fixture
def volume(engine):
    """A fresh named volume, removed after the test (with any container left on it)."""
    name = f"etrt-test-{os.getpid()}-{os.urandom(4).hex()}"
    engine.podman("volume", "create", name)
    yield name
    engine.remove_started()
    engine.podman("volume", "rm", "-f", name, check=False)
