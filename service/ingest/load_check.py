"""Runs what native code does with an upload in a child process, before the server trusts it.

A program is native code's input, and so is a TensorRT plan: a bad one can crash or hang the
process that opens it. So the server never opens an unchecked program or plan itself; a child with
a time limit does, and reports back what it found or what went wrong. One child per upload does
both steps, so each plan is deserialized once (the TensorRT check hands the engine it verified to
the delegate that loads it):

- isolated work runs delegate checks' calls into their own runtimes (deserializing TensorRT
  plans), answering each as it finishes, so a crash is pinned on the call that caused it;
- then the load step loads every method and reports each one's metadata (the model description).

The child writes to a report file, not stdout, so native log output cannot corrupt it; its
stderr goes to a file too, of which only the tail is read back (a looping child can write a lot).

A program whose delegates cannot run on this host (TensorRT plans stored unverified) is checked
without loading its methods: loading initializes the delegates, which must fail here. The child
then only opens the program and its data, which still verifies every flatbuffer in isolation.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from service import rules
from service.errors import Problem
from service.ingest import child_guard

_STDERR_TAIL = 4096


@dataclass
class LoadCheckResult:
    methods: list[dict]
    problems: list[Problem]


@dataclass
class ChildEnd:
    """How a child ended, in words for a problem message, and the tail of what it wrote."""

    timed_out: bool
    how: str
    tail: str


@dataclass
class CheckRun:
    answers: list[dict]
    loaded: dict | None
    end: ChildEnd


# Check children started by this process, so a test can tell how many one upload costs.
children_started = 0


def _child_env() -> dict:
    """The child must import `service` and any setup module exactly as this process does."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    # ExecuTorch's own log lines on its stderr: a crash report quotes their tail.
    env.setdefault("ETHOST_EXECUTORCH_LOG", "all")
    return env


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # real-time signals have no name
        return str(number)


def _run_child(request: dict, timeout_s: float) -> ChildEnd:
    pid_file = child_guard.pid_file_for(Path(request["report"]))
    request = {**request, "parent": os.getpid(), "pid_file": str(pid_file)}
    with tempfile.TemporaryFile() as stderr:
        child = subprocess.Popen(
            [sys.executable, "-m", "service.ingest.load_check", json.dumps(request)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=_child_env(),
            start_new_session=True,
        )
        try:
            child.wait(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            timed_out = True
        finally:
            pid_file.unlink(missing_ok=True)
        tail = _tail(stderr)
    if timed_out:
        how = f"did not finish within {timeout_s:g} s (the check process was killed)"
    elif child.returncode < 0:
        how = f"was killed by signal {_signal_name(-child.returncode)}"
    elif child.returncode:
        how = f"exited with status {child.returncode}"
    else:
        how = "exited normally"
    return ChildEnd(timed_out, how, tail)


def _tail(stderr) -> str:
    size = stderr.seek(0, os.SEEK_END)
    stderr.seek(max(0, size - _STDERR_TAIL))
    text = stderr.read().decode("utf-8", "replace").strip()
    return f"; it reported: {text}" if text else ""


def run_checks(
    work: list[dict],
    load: dict | None,
    report: Path,
    backend_setup: tuple[str, ...],
    timeout_s: float,
) -> CheckRun:
    """One child: the backend setup, then each work item's "module:function" called with its
    "request" (answered in order: {"answer": value} or {"error": reason}), then, if `load` is
    given ({"program", "data", "load_methods"}), the program opened and its methods loaded.
    Fewer answers than work items means the call after the last answer crashed or hung the child
    (or, with no answer at all, possibly the setup before it); all answers but no load outcome
    means loading the program did."""
    global children_started
    request = {
        "work": work,
        "load": load,
        "backend_setup": list(backend_setup),
        "report": str(report),
    }
    children_started += 1
    end = _run_child(request, timeout_s)
    try:
        lines = report.read_text().splitlines()
    except FileNotFoundError:
        lines = []
    finally:
        report.unlink(missing_ok=True)
    answers, loaded = [], None
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:  # the line the child was writing when it died
            break
        if "load" in entry:
            loaded = entry["load"]
        else:
            answers.append(entry)
    return CheckRun(answers, loaded, end)


def load_result(run: CheckRun, program_name: str, file_names: dict[str, str]) -> LoadCheckResult:
    """The load step's outcome as methods or one problem; file_names maps the paths the child
    was given to the names the user knows them by (the program's is program_name)."""
    end = run.end
    if run.loaded is None:
        if end.timed_out:
            return _refused(
                program_name, rules.PROGRAM_LOAD_TIMEOUT, f"loading the program {end.how}{end.tail}"
            )
        return _refused(
            program_name,
            rules.PROGRAM_LOAD_CRASHED,
            f"the process loading the program {end.how} without a report{end.tail}",
        )
    if run.loaded["ok"]:
        return LoadCheckResult(run.loaded["methods"], [])
    file = file_names.get(run.loaded.get("path") or "") or program_name
    return _refused(file, rules.PROGRAM_LOAD_FAILED, _named(run.loaded["error"], file_names))


def _named(message: str, file_names: dict[str, str]) -> str:
    """ExecuTorch's message with the staged paths it quotes (a scratch folder, part-N) written as
    the names the files were uploaded under: those are the files a user can look at."""
    for path in sorted(file_names, key=len, reverse=True):  # part-10 before part-1
        message = message.replace(path, repr(file_names[path]))
    return message


def _refused(file: str, rule: str, message: str) -> LoadCheckResult:
    return LoadCheckResult([], [Problem(file, rule, message)])


def _load(load: dict, ethost) -> dict:
    method = None
    try:
        program = ethost.Program(load["program"], load["data"])
        methods = []
        if load["load_methods"]:
            for method in program.method_names:
                program.load_method(method)
                methods.append(program.method_meta(method))
        return {"ok": True, "methods": methods}
    except Exception as exc:  # every failure is reported to the parent, whatever its type
        where = f"method {method!r}: " if method else ""
        return {
            "ok": False,
            "error": f"{where}{type(exc).__name__}: {exc}",
            "path": getattr(exc, "path", None),
        }


def _outcomes(request: dict):
    from service.native_host import import_host

    try:
        ethost = import_host(request["backend_setup"])
    except Exception as exc:  # without the backend nothing can be answered or loaded
        error = f"{type(exc).__name__}: {exc}"
        yield from ({"error": f"the backend setup failed: {error}"} for _ in request["work"])
        if request["load"] is not None:
            yield {"load": {"ok": False, "error": f"the backend setup failed: {error}"}}
        return
    for work in request["work"]:
        try:
            module, _, function = work["function"].partition(":")
            yield {"answer": getattr(importlib.import_module(module), function)(work["request"])}
        except Exception as exc:  # a failing call is answered, and the next one still runs
            yield {"error": f"{type(exc).__name__}: {exc}"}
    if request["load"] is not None:
        yield {"load": _load(request["load"], ethost)}


def main() -> None:
    request = json.loads(sys.argv[1])
    child_guard.die_with_parent(request["parent"])
    child_guard.record(Path(request["pid_file"]))
    with open(request["report"], "w") as report:
        for outcome in _outcomes(request):
            report.write(json.dumps(outcome) + "\n")
            report.flush()


if __name__ == "__main__":
    main()
