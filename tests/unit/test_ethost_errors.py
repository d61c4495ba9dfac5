"""Every failure reaches Python as a specific exception that names its cause and file."""

import re
import shutil

import ethost
import numpy as np
import pytest

from support.program_fixtures import (  # noqa: F401  (fixtures)
    dynamic_batch_program,
    external_weights_program,
    linear_relu_program,
    mix_of_ops_program,
    split_weights_program,
)

ERROR_TEXT = re.compile(r"^[A-Za-z]+ \(0x[0-9a-f]{2}\) ")


def test_missing_program_file(tmp_path):
    missing = tmp_path / "missing.pte"
    with pytest.raises(FileNotFoundError) as info:
        ethost.Program(missing)
    assert info.value.filename == str(missing)


def test_missing_data_file(external_weights_program, tmp_path):
    missing = tmp_path / "weights.ptd"
    with pytest.raises(FileNotFoundError) as info:
        ethost.Program(external_weights_program.pte, [missing])
    assert info.value.filename == str(missing)


def test_directory_as_data_file(external_weights_program):
    folder = external_weights_program.ptds[0].parent
    with pytest.raises(IsADirectoryError) as info:
        ethost.Program(external_weights_program.pte, [folder])
    assert info.value.filename == str(folder)


def test_directory_as_program(linear_relu_program):
    with pytest.raises(IsADirectoryError):
        ethost.Program(linear_relu_program.pte.parent)


def test_empty_program_file(tmp_path):
    empty = tmp_path / "empty.pte"
    empty.write_bytes(b"")
    with pytest.raises(ethost.ExecuTorchError) as info:
        ethost.Program(empty)
    assert info.value.path == str(empty)
    assert "empty" in str(info.value)


def test_data_file_given_as_program(external_weights_program):
    ptd = external_weights_program.ptds[0]
    with pytest.raises(ethost.ExecuTorchError) as info:
        ethost.Program(ptd)
    assert info.value.path == str(ptd)
    assert ERROR_TEXT.match(str(info.value))
    assert str(ptd) in str(info.value)


def test_program_given_as_data_file(external_weights_program):
    pte = external_weights_program.pte
    with pytest.raises(ethost.ExecuTorchError) as info:
        ethost.Program(pte, [pte])
    assert info.value.path == str(pte)
    assert "loading data file" in str(info.value)
    with pytest.raises(ethost.ExecuTorchError):
        ethost.data_file_keys(pte)


def test_method_needs_data_files_that_were_not_given(external_weights_program):
    program = ethost.Program(external_weights_program.pte)
    with pytest.raises(ethost.ExecuTorchError) as info:
        program.load_method("forward")
    error = info.value
    assert error.path == str(external_weights_program.pte)
    assert str(error).startswith(
        f"{error.error_name} (0x{error.code:02x}) loading method 'forward' of "
    )
    assert error.context


def test_one_of_two_data_files_missing_from_the_list(split_weights_program):
    first = split_weights_program.ptds[0]
    program = ethost.Program(split_weights_program.pte, [first])
    with pytest.raises(ethost.ExecuTorchError) as info:
        program.load_method("forward")
    error = info.value
    assert error.error_name in {"NotFound", "InvalidExternalData"}
    assert error.code in {0x20, 0x24}
    assert str(first) in error.context  # names the data files that were searched
    assert ERROR_TEXT.match(str(error))


def test_same_key_in_two_data_files(split_weights_program, tmp_path):
    first = split_weights_program.ptds[0]
    copy = tmp_path / "copy.ptd"
    shutil.copy(first, copy)
    with pytest.raises(ethost.ExecuTorchError) as info:
        ethost.Program(split_weights_program.pte, [first, copy])
    assert str(copy) in info.value.path


def test_unknown_method(linear_relu_program):
    program = ethost.Program(linear_relu_program.pte)
    with pytest.raises(ethost.ExecuTorchError) as info:
        program.load_method("nope")
    assert "nope" in str(info.value)
    assert info.value.error_name == "InvalidArgument"


def test_error_attributes(external_weights_program):
    with pytest.raises(ethost.ExecuTorchError) as info:
        ethost.Program(external_weights_program.pte).load_method("forward")
    error = info.value
    assert isinstance(error, RuntimeError)
    assert isinstance(error.code, int) and isinstance(error.error_name, str)
    assert isinstance(error.context, str)


@pytest.fixture(scope="module")
def mix_method(mix_of_ops_program):
    return ethost.Program(mix_of_ops_program.pte).load_method("forward")


def good_mix_inputs():
    return [np.ones((3, 8), np.float32), np.array([1, 2, 3], np.int64)]


def test_wrong_input_count(mix_method):
    with pytest.raises(ethost.InputError, match="expected 2 inputs, got 1") as info:
        mix_method.execute(good_mix_inputs()[:1])
    assert info.value.index is None
    assert isinstance(info.value, ValueError)


def test_wrong_dtype_names_the_input(mix_method):
    inputs = good_mix_inputs()
    inputs[1] = inputs[1].astype(np.int32)
    with pytest.raises(
        ethost.InputError, match=r"input 1.*expected dtype int64, got int32"
    ) as info:
        mix_method.execute(inputs)
    assert info.value.index == 1
    assert info.value.input_name.startswith("input 1")


def test_wrong_shape_names_the_input(mix_method):
    inputs = good_mix_inputs()
    inputs[0] = np.ones((3, 9), np.float32)
    with pytest.raises(ethost.InputError, match=r"input 0.*expected shape \(3, 8\), got \(3, 9\)"):
        mix_method.execute(inputs)
    inputs[0] = np.ones((24,), np.float32)
    with pytest.raises(ethost.InputError, match="input 0"):
        mix_method.execute(inputs)


def test_not_an_array(mix_method):
    inputs = good_mix_inputs()
    inputs[0] = [[1.0] * 8] * 3
    with pytest.raises(ethost.InputError, match="input 0.*got list"):
        mix_method.execute(inputs)


def test_refused_input_leaves_instance_usable(mix_method):
    with pytest.raises(ethost.InputError):
        mix_method.execute([np.ones((3, 8), np.float64), np.array([1, 2, 3])])
    assert [o.shape for o in mix_method.execute(good_mix_inputs())] == [(6, 8), (3, 1)]


@pytest.mark.parametrize("shape", [(17, 4), (3, 5), (3,), (0, 4, 1)])
def test_dynamic_dimension_out_of_bounds(dynamic_batch_program, shape):
    method = ethost.Program(dynamic_batch_program.pte).load_method("forward")
    with pytest.raises(ethost.InputError, match=r"input 0.*upper bounds"):
        method.execute([np.ones(shape, np.float32)])
