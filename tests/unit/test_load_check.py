"""The isolated load check and isolated work, with real child processes and real programs."""

import os
import signal

import pytest

from service.ingest import load_check
from service.ingest.load_check import load_result, run_checks
from support.foreign_delegate import export_xnnpack_linear
from support.program_fixtures import external_weights_program, linear_relu_program  # noqa: F401

# slow (left out of the quick lane, docs/development.md): real child processes, some killed at their
# time limits
pytestmark = pytest.mark.slow


def check_program(program, program_name, data, report, setup, timeout, load_methods=True):
    """The load step alone, as the pipeline runs it when no delegate has isolated work."""
    load = {"program": str(program), "data": [str(p) for p in data], "load_methods": load_methods}
    return load_result(
        run_checks([], load, report, setup, timeout), program_name, {str(p): p.name for p in data}
    )


def run_isolated(work, report, setup, timeout):
    run = run_checks(work, None, report, setup, timeout)
    assert run.loaded is None
    return run.answers, run.end


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


def test_without_loading_methods_only_opening_the_program_is_checked(
    tmp_path, programs_dir, external_weights_program
):
    unloadable = check_program(
        export_xnnpack_linear(programs_dir),
        "model.pte",
        [],
        tmp_path / "report.json",
        (),
        60.0,
        load_methods=False,
    )
    assert unloadable.problems == [] and unloadable.methods == []
    [problem] = check_program(
        external_weights_program.pte,
        "model.pte",
        [tmp_path / "none.ptd"],
        tmp_path / "report.json",
        (),
        60.0,
        load_methods=False,
    ).problems
    assert problem.rule == "program.load_failed" and "FileNotFoundError" in problem.message


def test_a_crashing_child_is_reported_with_its_output(tmp_path, linear_relu_program):
    [problem] = run(
        tmp_path, linear_relu_program.pte, setup=("support.load_check_faults:abort_in_load_check",)
    ).problems
    assert problem.rule == "program.load_crashed"
    assert "SIGABRT" in problem.message and "aborting on purpose" in problem.message


def test_a_hanging_child_is_killed_at_the_time_limit(tmp_path, linear_relu_program):
    [problem] = run(
        tmp_path,
        linear_relu_program.pte,
        timeout=3.0,
        setup=("support.load_check_faults:hang_in_load_check",),
    ).problems
    assert problem.rule == "program.load_timeout" and "3 s" in problem.message


def test_a_broken_backend_setup_is_reported(tmp_path, linear_relu_program):
    [problem] = run(tmp_path, linear_relu_program.pte, setup=("no_such_module:setup",)).problems
    assert problem.rule == "program.load_failed" and "no_such_module" in problem.message


# --- isolated work: answers in order, a crash pinned on the call that caused it -----------------


def work(*functions):
    return [
        {"function": f"support.load_check_faults:{f}", "request": {"n": i}}
        for i, f in enumerate(functions)
    ]


def test_isolated_work_is_answered_in_order_in_another_process(tmp_path):
    answers, end = run_isolated(
        work("answer_with_pid", "fail_in_work", "answer_with_pid"),
        tmp_path / "work.jsonl",
        (),
        60.0,
    )
    assert [a.get("answer", {}).get("n") for a in answers] == [0, None, 2]
    assert answers[1] == {"error": "RuntimeError: refusing on purpose"}
    assert {a["answer"]["pid"] for a in (answers[0], answers[2])} != {os.getpid()}
    assert end.how == "exited normally" and not end.timed_out
    assert not (tmp_path / "work.jsonl").exists()


def test_a_crash_in_isolated_work_keeps_the_answers_before_it(tmp_path):
    answers, end = run_isolated(
        work("answer_with_pid", "abort_in_work", "answer_with_pid"),
        tmp_path / "work.jsonl",
        (),
        60.0,
    )
    assert [a["answer"]["n"] for a in answers] == [0]
    assert end.how == "was killed by signal SIGABRT" and not end.timed_out
    assert "aborting in isolated work on purpose" in end.tail


def test_hanging_isolated_work_is_killed_at_the_time_limit(tmp_path):
    answers, end = run_isolated(work("hang_in_work"), tmp_path / "work.jsonl", (), 2.0)
    assert answers == [] and end.timed_out and "within 2 s" in end.how


def test_a_broken_backend_setup_answers_every_call_with_its_error(tmp_path):
    answers, _ = run_isolated(
        work("answer_with_pid", "answer_with_pid"),
        tmp_path / "w.jsonl",
        ("no_such_module:setup",),
        60.0,
    )
    assert len(answers) == 2 and all("no_such_module" in a["error"] for a in answers)


def test_work_and_load_share_one_child(tmp_path, linear_relu_program):
    run = run_checks(
        work("answer_with_pid", "answer_with_pid"),
        {"program": str(linear_relu_program.pte), "data": [], "load_methods": True},
        tmp_path / "w.jsonl",
        (),
        60.0,
    )
    assert run.answers[0]["answer"]["pid"] == run.answers[1]["answer"]["pid"] != os.getpid()
    assert [m["name"] for m in load_result(run, "model.pte", {}).methods] == ["forward"]


def test_a_load_failure_after_the_work_keeps_the_answers(tmp_path):
    run = run_checks(
        work("answer_with_pid"),
        {"program": str(tmp_path / "absent.pte"), "data": [], "load_methods": True},
        tmp_path / "w.jsonl",
        (),
        60.0,
    )
    [problem] = load_result(run, "model.pte", {}).problems
    assert len(run.answers) == 1 and problem.rule == "program.load_failed"


def test_signals_without_a_name_are_named_by_number():
    assert load_check._signal_name(signal.SIGABRT) == "SIGABRT"
    assert load_check._signal_name(signal.SIGRTMIN + 2) == str(signal.SIGRTMIN + 2)


def test_only_the_tail_of_a_childs_stderr_is_kept(tmp_path):
    with open(tmp_path / "stderr", "w+b") as stderr:
        stderr.write(b"head " + b"x" * 100_000 + b" the end")
        tail = load_check._tail(stderr)
    assert tail.startswith("; it reported: x") and tail.endswith(" the end")
    assert len(tail) <= len("; it reported: ") + load_check._STDERR_TAIL
