"""The isolated load check, with real child processes and real exported programs."""

from service.load_check import check_program
from support.foreign_delegate import export_xnnpack_linear
from support.program_fixtures import external_weights_program, linear_relu_program  # noqa: F401


def run(tmp_path, program, data=(), setup=(), timeout=60.0):
    return check_program(program, "model.pte", list(data), tmp_path / "report.json", setup, timeout)


def test_a_good_program_reports_every_method(tmp_path, external_weights_program):
    result = run(tmp_path, external_weights_program.pte, external_weights_program.ptds)
    assert result.problems == []
    [method] = result.methods
    assert method["name"] == "forward" and method["inputs"][0]["shape"] == [2, 6]
    assert not (tmp_path / "report.json").exists()


def test_missing_external_data_is_the_childs_error(tmp_path, external_weights_program):
    [problem] = run(tmp_path, external_weights_program.pte).problems
    assert problem.rule == "program.load_failed"
    assert "forward" in problem.message and "ExecuTorchError" in problem.message


def test_unregistered_backend_fails_the_load(tmp_path, programs_dir):
    [problem] = run(tmp_path, export_xnnpack_linear(programs_dir)).problems
    assert problem.rule == "program.load_failed" and "XnnpackBackend" in problem.message


def test_without_loading_methods_only_opening_the_program_is_checked(tmp_path, programs_dir,
                                                                     external_weights_program):
    unloadable = check_program(export_xnnpack_linear(programs_dir), "model.pte", [],
                               tmp_path / "report.json", (), 60.0, load_methods=False)
    assert unloadable.problems == [] and unloadable.methods == []
    [problem] = check_program(external_weights_program.pte, "model.pte", [tmp_path / "none.ptd"],
                              tmp_path / "report.json", (), 60.0, load_methods=False).problems
    assert problem.rule == "program.load_failed" and "FileNotFoundError" in problem.message


def test_a_crashing_child_is_reported_with_its_output(tmp_path, linear_relu_program):
    [problem] = run(tmp_path, linear_relu_program.pte,
                    setup=("support.load_check_faults:abort_in_load_check",)).problems
    assert problem.rule == "program.load_crashed"
    assert "SIGABRT" in problem.message and "aborting on purpose" in problem.message


def test_a_hanging_child_is_killed_at_the_time_limit(tmp_path, linear_relu_program):
    [problem] = run(tmp_path, linear_relu_program.pte, timeout=3.0,
                    setup=("support.load_check_faults:hang_in_load_check",)).problems
    assert problem.rule == "program.load_timeout" and "3 s" in problem.message


def test_a_broken_backend_setup_is_reported(tmp_path, linear_relu_program):
    [problem] = run(tmp_path, linear_relu_program.pte, setup=("no_such_module:setup",)).problems
    assert problem.rule == "program.load_failed" and "no_such_module" in problem.message
