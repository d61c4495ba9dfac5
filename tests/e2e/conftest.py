"""End-to-end fixtures: real server processes over their own artifacts directories."""

from pathlib import Path

import pytest

from support.server import ServerProcess


@pytest.fixture
def start_server(tmp_path_factory):
    """start_server(*extra_args) -> a running ServerProcess; all are stopped after the test."""
    started = []

    def start(*extra_args, artifacts=None):
        root = artifacts or tmp_path_factory.mktemp("server") / "artifacts"
        server = ServerProcess(root, *extra_args).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    """One server for a whole module of tests that do not depend on an empty registry."""
    server = ServerProcess(tmp_path_factory.mktemp("shared") / "artifacts").start()
    yield server
    server.stop()


def pytest_collection_modifyitems(config, items):
    """Marks every test under tests/e2e `e2e` (each starts real server processes), so the quick
    lane can leave them out: `pytest -m "not e2e and not slow"` (docs/development.md)."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.e2e)
