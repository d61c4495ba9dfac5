"""Session fixtures exporting TensorRTBackend programs (stand-in plans) once per test session.

Import the ones a module needs (`from support.trt_program_fixtures import mixed_16`).
"""

import pytest


def _export(programs_dir, *spec, **options):
    # Imported here: the exporter needs executorch.exir, which only exporting tests may load.
    from support.trt_programs import export_trt_program

    return export_trt_program(programs_dir, *spec, **options)


@pytest.fixture(scope="session")
def mixed_16(programs_dir):
    """Two delegates around a CPU op, planned on ExecuTorch's default 16-byte boundaries."""
    return _export(programs_dir, "mixed", alignment=16)


@pytest.fixture(scope="session")
def mixed_256(programs_dir):
    """The same program planned on 256-byte boundaries."""
    return _export(programs_dir, "mixed", alignment=256)


@pytest.fixture(scope="session")
def add_external(programs_dir):
    """One delegate whose engine lives in a .ptd, found by engine_key."""
    return _export(programs_dir, "add", alignment=16, external=True)


@pytest.fixture(scope="session")
def add_dynamic(programs_dir):
    """x + y with dimension 0 of both inputs dynamic (trt_programs.DYNAMIC_ROWS)."""
    return _export(programs_dir, "add", alignment=16, dynamic=True)
