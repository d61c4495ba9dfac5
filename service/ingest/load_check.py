"""Runs what native code does with an upload in a child process, before the server trusts it.

A program is native code's input, and so is a TensorRT plan: a bad one can crash or hang the
process that opens it. So the server never opens an unchecked program or plan itself; a child with
a time limit does, and reports back what it found or what went wrong. Two kinds of run:

- the load check loads every method and reports each one's metadata (the model description);
- isolated work runs delegate checks' calls into their own runtimes (deserializing TensorRT
  plans), answering each as it finishes, so a crash is pinned on the call that caused it.

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


def _child_env() -> dict:
    """The child must import `service` and any setup module exactly as this process does."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
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
        child = subprocess.Popen([sys.executable, "-m", "service.ingest.load_check", json.dumps(request)],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=stderr, env=_child_env(), start_new_session=True)
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


def check_program(program: Path, program_name: str, data: list[Path], report: Path,
                  backend_setup: tuple[str, ...], timeout_s: float,
                  load_methods: bool = True) -> LoadCheckResult:
    """load_methods=False is for programs whose delegates cannot initialize on this host: the
    child then only opens (fully verifies) the program, and the result carries no methods."""
    request = {"program": str(program), "data": [str(p) for p in data],
               "backend_setup": list(backend_setup), "report": str(report),
               "load_methods": load_methods}
    end = _run_child(request, timeout_s)
    try:
        if end.timed_out:
            return _refused(program_name, "program.load_timeout",
                            f"loading the program {end.how}{end.tail}")
        try:
            outcome = json.loads(report.read_text())
        except (FileNotFoundError, ValueError):
            return _refused(program_name, "program.load_crashed",
                            f"the process loading the program {end.how} without a report"
                            f"{end.tail}")
    finally:
        report.unlink(missing_ok=True)
    if outcome["ok"]:
        return LoadCheckResult(outcome["methods"], [])
    return _refused(outcome.get("file") or program_name, "program.load_failed", outcome["error"])


def run_isolated(work: list[dict], report: Path, backend_setup: tuple[str, ...],
                 timeout_s: float) -> tuple[list[dict], ChildEnd]:
    """Calls each work item's "module:function" with its "request" in one child, after the backend
    setup. Returns the answers in order ({"answer": value} or {"error": reason}) and how the
    child ended; fewer answers than work items means the call after the last answer crashed or
    hung the child (or, with no answer at all, possibly the setup before it)."""
    request = {"work": work, "backend_setup": list(backend_setup), "report": str(report)}
    end = _run_child(request, timeout_s)
    try:
        lines = report.read_text().splitlines()
    except FileNotFoundError:
        lines = []
    finally:
        report.unlink(missing_ok=True)
    answers = []
    for line in lines:
        try:
            answers.append(json.loads(line))
        except ValueError:  # the line the child was writing when it died
            break
    return answers, end


def _refused(file: str, rule: str, message: str) -> LoadCheckResult:
    return LoadCheckResult([], [Problem(file, rule, message)])


def _child(request: dict) -> dict:
    from service.backends.host import import_host

    method = None
    try:
        ethost = import_host(request["backend_setup"])
        program = ethost.Program(request["program"], request["data"])
        methods = []
        if request["load_methods"]:
            for method in program.method_names:
                program.load_method(method)
                methods.append(program.method_meta(method))
        return {"ok": True, "methods": methods}
    except Exception as exc:  # every failure is reported to the parent, whatever its type
        where = f"method {method!r}: " if method else ""
        path = getattr(exc, "path", None)
        name = Path(path).name if path and Path(path).name != "program.pte" else None
        return {"ok": False, "error": f"{where}{type(exc).__name__}: {exc}", "file": name}


def _answers(request: dict):
    from service.backends.host import import_host

    try:
        import_host(request["backend_setup"])
    except Exception as exc:  # without the backend no call can be answered
        error = f"the backend setup failed: {type(exc).__name__}: {exc}"
        yield from ({"error": error} for _ in request["work"])
        return
    for work in request["work"]:
        try:
            module, _, function = work["function"].partition(":")
            yield {"answer": getattr(importlib.import_module(module), function)(work["request"])}
        except Exception as exc:  # a failing call is answered, and the next one still runs
            yield {"error": f"{type(exc).__name__}: {exc}"}


def main() -> None:
    request = json.loads(sys.argv[1])
    child_guard.die_with_parent(request["parent"])
    child_guard.record(Path(request["pid_file"]))
    report = Path(request["report"])
    if "work" in request:
        with open(report, "w") as answers:
            for answer in _answers(request):
                answers.write(json.dumps(answer) + "\n")
                answers.flush()
        return
    outcome = _child(request)
    temporary = report.with_suffix(".tmp")
    temporary.write_text(json.dumps(outcome))
    os.replace(temporary, report)


if __name__ == "__main__":
    main()
