"""The ingest pipeline on real staged files, including the delegate checks it is given."""

import hashlib
import os
import shutil

import pytest

from service.backends.registry import ingest_backends
from service.config import Settings
from service.errors import Problem
from service.ingest import pipeline as ingest
from service.ingest.delegates import DelegateReport, IngestContext, IsolatedWork
from service.ingest.pipeline import IngestRefused, StagedFile, StagedUpload
from support.foreign_delegate import export_xnnpack_linear
from support.program_fixtures import external_weights_program  # noqa: F401


def stage(tmp_path, program, data=(), program_name="model.pte", name="m"):
    directory = tmp_path / "staged"
    directory.mkdir()

    def staged(index, file_name, source):
        path = directory / f"part-{index}"
        shutil.copyfile(source, path)
        return StagedFile(
            file_name, path, path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest()
        )

    return StagedUpload(
        name,
        False,
        directory,
        staged(0, program_name, program),
        [staged(i + 1, n, p) for i, (n, p) in enumerate(data)],
    )


# Stand-in checks (backend id -> check) given to ingest beside the enabled backends' own.
_stand_ins: dict = {}


@pytest.fixture
def checks():
    """Adds stand-in checks for one test only."""
    yield _stand_ins.__setitem__
    _stand_ins.clear()


def run_ingest(upload, settings):
    """As the dataplane calls it: with the enabled backends' checks (and the stand-ins)."""
    return ingest.run_ingest(upload, settings, ingest_backends(settings, _stand_ins))


def test_accepted_upload_gets_final_names_and_a_description(tmp_path, external_weights_program):
    [weights] = external_weights_program.ptds
    upload = stage(tmp_path, external_weights_program.pte, [(weights.name, weights)])
    description = run_ingest(upload, Settings())
    assert sorted(p.name for p in upload.directory.iterdir()) == [weights.name, "program.pte"]
    assert [f.role for f in description.files] == ["program", "data"]
    assert description.methods[0]["external_data_keys"]


def test_delegate_check_sees_blob_and_named_data_and_its_problems_refuse(
    tmp_path, programs_dir, checks, external_weights_program
):
    seen = []

    def check(delegate, context):
        seen.append(
            (
                delegate.method,
                delegate.index,
                delegate.backend_id,
                len(delegate.blob),
                context.named_data_span("first.weight") is not None,
                context.method(delegate.method).planned_buffer_sizes,
            )
        )
        return DelegateReport(problems=[Problem(context.program_name, "test.delegate", "no")])

    checks("XnnpackBackend", check)
    [weights] = external_weights_program.ptds
    upload = stage(tmp_path, export_xnnpack_linear(programs_dir), [(weights.name, weights)])
    with pytest.raises(IngestRefused) as refused:
        run_ingest(upload, Settings())
    assert [p.rule for p in refused.value.problems] == ["test.delegate"]
    [(method, index, backend, blob_size, found, sizes)] = seen
    assert (method, index, backend, found) == ("forward", 0, "XnnpackBackend", True)
    assert blob_size > 0 and sizes


def test_an_upload_refused_before_the_child_starts_none(tmp_path, programs_dir):
    from service.ingest import load_check

    started = load_check.children_started
    with pytest.raises(IngestRefused):
        run_ingest(
            stage(tmp_path, export_xnnpack_linear(programs_dir), name="bad name!"), Settings()
        )
    assert load_check.children_started == started


def test_a_failing_delegate_check_refuses_instead_of_crashing(tmp_path, programs_dir, checks):
    checks("XnnpackBackend", lambda delegate, context: 1 / 0)
    with pytest.raises(IngestRefused) as refused:
        run_ingest(stage(tmp_path, export_xnnpack_linear(programs_dir)), Settings())
    [problem] = refused.value.problems
    assert problem.rule == "delegate.check_failed" and "ZeroDivisionError" in problem.message


def test_passing_delegate_check_then_the_load_check_runs(tmp_path, programs_dir, checks):
    checks("XnnpackBackend", lambda d, c: DelegateReport(details={"checked": True}))
    with pytest.raises(IngestRefused) as refused:  # with XNNPACK not registered in the child
        run_ingest(stage(tmp_path, export_xnnpack_linear(programs_dir)), Settings(backends=()))
    assert [p.rule for p in refused.value.problems] == ["program.load_failed"]


def test_a_delegate_that_cannot_run_here_is_stored_unavailable_without_loading(
    tmp_path, programs_dir, checks
):
    # XnnpackBackend is not registered in the load-check child: loading the method would fail
    # (see above), so passing shows the child only opened the program.
    checks(
        "XnnpackBackend",
        lambda d, c: DelegateReport(
            details={"runnable": False, "unavailable_reason": "no accelerator here"}
        ),
    )
    program = export_xnnpack_linear(programs_dir)
    description = run_ingest(stage(tmp_path, program), Settings())
    assert description.runnable is False and description.not_runnable == "no accelerator here"
    [method] = description.methods
    assert method["delegates"][0]["backend"] == "XnnpackBackend"
    assert method["inputs"][0]["tag"] == "Tensor" and method["inputs"][0]["dtype"] == "float32"


def test_a_program_that_cannot_be_opened_is_refused_even_when_not_loaded(
    tmp_path, programs_dir, checks
):
    checks(
        "XnnpackBackend",
        lambda d, c: DelegateReport(
            details={"runnable": False, "unavailable_reason": "no accelerator here"}
        ),
    )
    program = tmp_path / "truncated.pte"
    data = export_xnnpack_linear(programs_dir).read_bytes()
    # Shorter than its header declares, yet every part the inspection reads is still there:
    # only the native host's full verification in the child finds it.
    program.write_bytes(data[:-16])
    with pytest.raises(IngestRefused) as refused:
        run_ingest(stage(tmp_path, program), Settings())
    assert [p.rule for p in refused.value.problems] == ["program.load_failed"]


def test_named_data_used_by_a_delegate_is_not_reported_unused(
    tmp_path, programs_dir, checks, external_weights_program
):
    [weights] = external_weights_program.ptds
    program = export_xnnpack_linear(programs_dir)

    def uses_weights(delegate, context):
        context.named_data_span("first.weight")
        return DelegateReport()

    checks("XnnpackBackend", uses_weights)
    context = IngestContext(
        Settings(),
        "model.pte",
        ingest.inspect_program(program),
        program,
        {weights.name: (weights, ingest.inspect_data_file(weights))},
    )
    ingest._delegate_reports(context, ingest_backends(Settings(), _stand_ins).checks)
    assert ingest._unused_data_warnings(context) == []
    context.used_keys.clear()
    assert len(ingest._unused_data_warnings(context)) == 1


# --- isolated work: calls a check must not make in the server -------------------------------------


def isolated(function, request, finished, doing="calling the test runtime"):
    """A check asking for `support.load_check_faults:<function>` to be called in the child."""

    def check(delegate, context):
        report = DelegateReport()
        report.isolated = IsolatedWork(
            f"support.load_check_faults:{function}",
            request,
            lambda answer: finished.append(answer),
            doing,
        )
        return report

    return check


def test_isolated_work_is_answered_from_another_process_even_with_other_problems(
    tmp_path, programs_dir, checks
):
    finished = []
    checks("XnnpackBackend", isolated("answer_with_pid", {"echo": 7}, finished))
    upload = stage(tmp_path, export_xnnpack_linear(programs_dir), name="bad name!")
    with pytest.raises(IngestRefused) as refused:
        run_ingest(upload, Settings())
    assert [p.rule for p in refused.value.problems] == ["model.characters"]
    [answer] = finished
    assert answer["echo"] == 7 and answer["pid"] != os.getpid()
    assert sorted(p.name for p in upload.directory.iterdir()) == ["part-0"]


@pytest.mark.parametrize(
    "function, rule, words",
    [
        ("abort_in_work", "delegate.check_crashed", "was killed by signal SIGABRT"),
        ("fail_in_work", "delegate.check_failed", "failed: RuntimeError: refusing on purpose"),
    ],
)
def test_isolated_work_that_crashes_or_fails_refuses_the_upload(
    tmp_path, programs_dir, checks, function, rule, words
):
    finished = []
    checks("XnnpackBackend", isolated(function, {}, finished))
    with pytest.raises(IngestRefused) as refused:
        run_ingest(stage(tmp_path, export_xnnpack_linear(programs_dir)), Settings())
    [problem] = refused.value.problems
    assert problem.rule == rule and finished == []
    assert (
        problem.message.startswith("method 'forward' delegate 0 (XnnpackBackend): ")
        and words in problem.message
    )
    assert "calling the test runtime" in problem.message


def test_isolated_work_that_hangs_is_stopped_at_the_time_limit(tmp_path, programs_dir, checks):
    checks("XnnpackBackend", isolated("hang_in_work", {}, []))
    with pytest.raises(IngestRefused) as refused:
        run_ingest(
            stage(tmp_path, export_xnnpack_linear(programs_dir)), Settings(load_check_timeout_s=2.0)
        )
    [problem] = refused.value.problems
    assert problem.rule == "delegate.check_timeout" and "within 2 s" in problem.message


def test_a_missing_key_names_the_uploaded_data_files_that_could_not_be_read(
    tmp_path, external_weights_program
):
    garbage = tmp_path / "garbage.ptd"
    garbage.write_bytes(b"garbage" * 10)
    upload = stage(tmp_path, external_weights_program.pte, [("weights.ptd", garbage)])
    with pytest.raises(IngestRefused) as refused:
        run_ingest(upload, Settings())
    by_rule = {p.rule: p for p in refused.value.problems}
    assert set(by_rule) == {"data.invalid", "external.missing_key"}
    message = by_rule["external.missing_key"].message
    assert "'weights.ptd' could not be" in message and "no data files were uploaded" not in message
