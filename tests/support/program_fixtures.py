"""Session fixtures exporting the programs of support.programs once per test session.

Import the fixtures you need into a test module (`from support.program_fixtures import
linear_relu_program`) or register this module as a pytest plugin.
"""

import pytest

from support import programs


@pytest.fixture(scope="session")
def linear_relu_program(programs_dir):
    return programs.export_linear_relu(programs_dir)


@pytest.fixture(scope="session")
def linear_relu_aligned_program(programs_dir):
    return programs.export_linear_relu(programs_dir, alignment=256)


@pytest.fixture(scope="session")
def mix_of_ops_program(programs_dir):
    return programs.export_mix_of_ops(programs_dir)


@pytest.fixture(scope="session")
def dynamic_batch_program(programs_dir):
    return programs.export_dynamic_batch(programs_dir)


@pytest.fixture(scope="session")
def external_weights_program(programs_dir):
    return programs.export_external_weights(programs_dir)


@pytest.fixture(scope="session")
def split_weights_program(programs_dir):
    return programs.export_split_weights(programs_dir)


@pytest.fixture(scope="session")
def two_methods_program(programs_dir):
    return programs.export_two_methods(programs_dir)


@pytest.fixture(scope="session")
def cpu_heavy_program(programs_dir):
    return programs.export_cpu_heavy(programs_dir)


@pytest.fixture(scope="session")
def dynamic_lookup_program(programs_dir):
    return programs.export_dynamic_lookup(programs_dir)


@pytest.fixture(scope="session")
def weight_bound_program(programs_dir):
    return programs.export_weight_bound(programs_dir)


@pytest.fixture(scope="session")
def every_datatype_program(programs_dir):
    return programs.export_every_datatype(programs_dir)


@pytest.fixture(scope="session")
def large_input_program(programs_dir):
    return programs.export_large_input(programs_dir)


@pytest.fixture(scope="session")
def image_program(programs_dir):
    return programs.export_image(programs_dir)


@pytest.fixture(scope="session")
def counter_program(programs_dir):
    return programs.export_counter(programs_dir)


@pytest.fixture(scope="session")
def wide_counter_program(programs_dir):
    return programs.export_counter(programs_dir, width=16384)
