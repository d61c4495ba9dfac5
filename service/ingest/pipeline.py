"""The ingest pipeline: every check an upload goes through before it may become a model.

All checks run and all problems are reported together, so a user fixes an upload in one round.
The isolated load step runs last, in the same child as the delegates' isolated work, and counts
only when everything else passed: it would only fail again for a reason already reported.

Delegate-specific checks (e.g. TensorRT plans) come with their backend and are handed to
run_ingest (service/ingest/delegates.py holds their contract); the pipeline calls them with each
delegate of that backend and a context to look up named data. A check's IsolatedWork runs in the
upload's one check child (service.ingest.load_check) before the program is loaded, so those
findings are still reported together with every other problem. The server
never runs native code on an unchecked upload itself: a plan that crashes its deserializer kills
only the child.
A check may accept a delegate it cannot run here (details "runnable": False with an
"unavailable_reason", e.g. TensorRT plans stored unverified on a host without TensorRT): the
model is then stored but described as unavailable, and its methods are described from the file
because loading them would initialize that delegate.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from service import rules
from service.config import Settings
from service.errors import Problem, clip
from service.ingest import name_rules
from service.ingest.delegates import DelegateReport, IngestBackends, IngestContext
from service.ingest.inspection import (
    DataFileInfo,
    DelegateInfo,
    InspectionError,
    OutsideSchemaWindow,
    ProgramInfo,
    inspect_data_file,
    inspect_program,
    method_meta,
)
from service.ingest.load_check import LoadCheckResult, load_result, run_checks
from service.ingest.staging import StagedFile, StagedUpload  # noqa: F401 (StagedFile re-exported)
from service.model_config.parse import check_model_config, parse_model_config
from service.model_config.records import NO_CONFIG, ModelConfig
from service.store.records import DATA, PROGRAM, PROGRAM_FILE, ModelDescription, StoredFile

log = logging.getLogger(__name__)


class IngestRefused(Exception):
    def __init__(self, problems: list[Problem]):
        super().__init__("; ".join(p.message for p in problems))
        self.problems = problems


def _name_problems(upload: StagedUpload) -> list[Problem]:
    problems = name_rules.check_model_name(upload.model_name)
    if upload.program is None:
        problems.append(
            Problem(
                None,
                rules.UPLOAD_PROGRAM_MISSING,
                "the upload has no 'program' file part (one .pte file)",
            )
        )
    else:
        problems += name_rules.check_program_name(upload.program.name)
    for data in upload.data:
        problems += name_rules.check_data_name(data.name)
    problems += name_rules.check_data_names_together([d.name for d in upload.data])
    return problems


def _inspect(upload: StagedUpload) -> tuple[ProgramInfo | None, dict[str, DataFileInfo], list]:
    problems = []
    program = None
    if upload.program is not None:
        try:
            program = inspect_program(upload.program.path)
        except OutsideSchemaWindow as exc:
            problems.append(
                Problem(
                    upload.program.name,
                    rules.PROGRAM_SCHEMA,
                    f"{clip(upload.program.name)!r} was {exc}",
                )
            )
        except InspectionError as exc:
            problems.append(
                Problem(
                    upload.program.name,
                    rules.PROGRAM_INVALID,
                    f"{clip(upload.program.name)!r} is not a valid ExecuTorch program: {exc}",
                )
            )
    data_files = {}
    for data in upload.data:
        try:
            data_files[data.name] = inspect_data_file(data.path)
        except OutsideSchemaWindow as exc:
            problems.append(Problem(data.name, rules.DATA_SCHEMA, f"{clip(data.name)!r} was {exc}"))
        except InspectionError as exc:
            problems.append(
                Problem(
                    data.name,
                    rules.DATA_INVALID,
                    f"{clip(data.name)!r} is not a valid ExecuTorch data file: {exc}",
                )
            )
    return program, data_files, problems


def _external_data_problems(
    program_name: str,
    program: ProgramInfo,
    data_files: dict[str, DataFileInfo],
    unreadable: list[str],
) -> list[Problem]:
    """`unreadable`: the uploaded data files that are no valid data file (refused already), so a
    missing key points at them rather than at the files that were read."""
    problems = []
    owners: dict[str, str] = {}
    for name, info in data_files.items():
        for key in info.keys:
            if key in owners:
                problems.append(
                    Problem(
                        name,
                        rules.DATA_DUPLICATE_KEY,
                        f"named data {clip(key)!r} is in both "
                        f"{clip(owners[key])!r} and {clip(name)!r}; the program "
                        "could get either",
                    )
                )
            owners.setdefault(key, name)
    for method in program.methods:
        missing = [key for key in method.external_keys if key not in owners]
        if missing:
            if unreadable:
                where = (
                    f"data files that could be read; {', '.join(repr(clip(n)) for n in unreadable)}"
                    " could not be (data.invalid)"
                )
            elif data_files:
                where = "uploaded data files"
            else:
                where = "upload (no data files were uploaded)"
            problems.append(
                Problem(
                    program_name,
                    rules.EXTERNAL_MISSING_KEY,
                    f"method {method.name!r} needs external data "
                    f"{', '.join(map(repr, missing))} that is not in the {where}",
                )
            )
    return problems


def _guarded(
    delegate: DelegateInfo,
    context: IngestContext,
    report: DelegateReport,
    step: Callable[..., object],
    *args,
):
    """Calls step(*args); a failing check must refuse the upload, not crash the server."""
    try:
        return step(*args)
    except Exception as exc:  # whatever a check raises becomes its problem
        log.exception("delegate check for %s failed", delegate.backend_id)
        report.problems.append(
            Problem(
                context.program_name,
                rules.DELEGATE_CHECK_FAILED,
                f"{delegate.where}: the ingest check failed: {type(exc).__name__}: {exc}",
            )
        )
        return None


def _run_child(
    context: IngestContext,
    setups: tuple[str, ...],
    reports: list,
    load: dict | None,
    report_path: Path,
    file_names: dict[str, str],
) -> LoadCheckResult | None:
    """Runs every check's isolated work, then the load step, in one child; hands the answers to
    the checks and returns the load step's result (None when there was none to run).

    After a crash in the work the rest of it runs in a new child, so each plan still gets its own
    verdict (the load step is then pointless: the upload is refused); after a time-out it does
    not: the limit is the upload's, not each plan's.
    """
    pending = [(delegate, report) for delegate, report in reports if report.isolated]
    if not pending and load is None:  # nothing to run: no child
        return None
    while True:
        run = run_checks(
            [{"function": r.isolated.function, "request": r.isolated.request} for _, r in pending],
            load,
            report_path,
            setups,
            context.settings.load_check_timeout_s,
        )
        for (delegate, report), answer in zip(pending, run.answers):
            if "error" in answer:
                report.problems.append(
                    Problem(
                        context.program_name,
                        rules.DELEGATE_CHECK_FAILED,
                        f"{delegate.where}: {report.isolated.doing} failed: {answer['error']}",
                    )
                )
            else:
                _guarded(delegate, context, report, report.isolated.finish, answer["answer"])
        if len(run.answers) >= len(pending):
            return None if load is None else load_result(run, context.program_name, file_names)
        delegate, report = pending[len(run.answers)]
        end = run.end
        rule = rules.DELEGATE_CHECK_TIMEOUT if end.timed_out else rules.DELEGATE_CHECK_CRASHED
        report.problems.append(
            Problem(
                context.program_name,
                rule,
                (
                    f"{delegate.where}: the isolated process {report.isolated.doing} {end.how}"
                    f"{end.tail}; the server did not load it"
                ),
            )
        )
        pending = [] if end.timed_out else pending[len(run.answers) + 1 :]
        if not pending:
            return None
        load = None


def _delegate_reports(context: IngestContext, checks: dict) -> list:
    """Each delegate's own check, run here; their isolated work is still to run."""
    reports = []
    for method in context.program.methods:
        for delegate in method.delegates:
            check = checks.get(delegate.backend_id)
            if check is None:
                continue
            failed = DelegateReport()  # receives the problem if the check raises
            report = _guarded(delegate, context, failed, check, delegate, context)
            reports.append((delegate, report or failed))
    return reports


def _collect(reports: list) -> tuple[dict, list, list]:
    details, problems, warnings = {}, [], []
    for delegate, report in reports:
        problems += report.problems
        warnings += report.warnings
        details[(delegate.method, delegate.index)] = report.details
    return details, problems, warnings


def _unused_data_warnings(context: IngestContext) -> list[str]:
    used = context.used_keys | {k for m in context.program.methods for k in m.external_keys}
    return [
        f"data file {name!r} is not used by the program (none of its {len(info.keys)} "
        "named data entries is needed)"
        for name, info in context.data_files.items()
        if not used & set(info.keys)
    ]


def _unavailable_reasons(delegate_details: dict) -> list[str]:
    reasons = [
        d["unavailable_reason"] for d in delegate_details.values() if d.get("runnable") is False
    ]
    return list(dict.fromkeys(reasons))


def _describe(
    upload: StagedUpload,
    program: ProgramInfo,
    methods_meta: list[dict],
    delegate_details: dict,
    warnings: list[str],
    unavailable: list[str],
    config: ModelConfig | None,
) -> ModelDescription:
    by_name = {m.name: m for m in program.methods}
    methods = []
    for meta in methods_meta:
        info = by_name.get(meta["name"])
        delegates = (
            []
            if info is None
            else [
                {
                    "index": d.index,
                    "backend": d.backend_id,
                    "details": delegate_details.get((info.name, d.index), {}),
                }
                for d in info.delegates
            ]
        )
        methods.append(
            {
                "name": meta["name"],
                "inputs": meta["inputs"],
                "outputs": meta["outputs"],
                "delegates": delegates,
                "external_data_keys": [] if info is None else info.external_keys,
                "planned_buffers": meta.get("planned_buffers", []),
            }
        )
    files = [StoredFile(upload.program.name, PROGRAM, upload.program.size, upload.program.sha256)]
    files += [StoredFile(d.name, DATA, d.size, d.sha256) for d in upload.data]
    return ModelDescription(
        upload.model_name,
        tuple(files),
        tuple(methods),
        tuple(warnings),
        "; ".join(unavailable) if unavailable else None,
        config or NO_CONFIG,
    )


def _move_to_final_names(upload: StagedUpload) -> None:
    """Only after the name rules passed may the uploaded names become file names."""
    target = upload.directory / PROGRAM_FILE
    os.rename(upload.program.path, target)
    upload.program.path = target
    for data in upload.data:
        target = upload.directory / data.name
        os.rename(data.path, target)
        data.path = target


def run_ingest(
    upload: StagedUpload, settings: Settings, backends: IngestBackends
) -> ModelDescription:
    """Checks a staged upload and returns its model description, or raises IngestRefused.

    `backends`: the enabled backends' delegate checks and setups (service.backends.registry).

    One child process runs every delegate's isolated work and, when nothing was found wrong
    before it started, the load step; a load outcome is ignored when the work found problems,
    since loading would only fail again for a reason already reported."""
    problems = _name_problems(upload)
    program, data_files, inspection_problems = _inspect(upload)
    problems += inspection_problems
    config, config_problems = parse_model_config(upload.config)
    problems += config_problems
    if program is None:
        raise IngestRefused(problems)
    problems += check_model_config(config, [method_meta(m) for m in program.methods])
    program_name = upload.program.name
    unreadable = [d.name for d in upload.data if d.name not in data_files]
    problems += _external_data_problems(program_name, program, data_files, unreadable)
    context = IngestContext(
        settings,
        program_name,
        program,
        upload.program.path,
        {d.name: (d.path, data_files[d.name]) for d in upload.data if d.name in data_files},
    )
    reports = _delegate_reports(context, backends.checks)
    details, _, _ = _collect(reports)
    unavailable = _unavailable_reasons(details)
    found_before = bool(problems) or any(r.problems for _, r in reports)
    load = (
        None
        if found_before
        else {
            "program": str(upload.program.path),
            "data": [str(d.path) for d in upload.data],
            "load_methods": not unavailable,
        }
    )
    loaded = _run_child(
        context,
        backends.setups,
        reports,
        load,
        upload.directory / ".check.jsonl",
        {
            str(upload.program.path): context.program_name,
            **{str(d.path): d.name for d in upload.data},
        },
    )
    details, delegate_problems, warnings = _collect(reports)
    problems += delegate_problems
    if problems:
        raise IngestRefused(problems)
    if loaded.problems:
        raise IngestRefused(loaded.problems)
    warnings += _unused_data_warnings(context)
    _move_to_final_names(upload)
    methods = [method_meta(m) for m in program.methods] if unavailable else loaded.methods
    return _describe(upload, program, methods, details, warnings, unavailable, config)
