"""Loads every method of an uploaded program in a child process before the server trusts it.

A program is native code's input: a bad one can crash or hang the process that opens it. So the
server never opens an unchecked program itself; a child with a time limit does, and reports back
either each method's metadata (which becomes the model description) or what went wrong.
The child writes its report to a file, not stdout, so native log output cannot corrupt it.

A program whose delegates cannot run on this host (TensorRT plans stored unverified) is checked
without loading its methods: loading initializes the delegates, which must fail here. The child
then only opens the program and its data, which still verifies every flatbuffer in isolation.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from service.ingest_rules import Problem

_STDERR_TAIL = 2000


@dataclass
class LoadCheckResult:
    methods: list[dict]
    problems: list[Problem]


def _child_env() -> dict:
    """The child must import `service` and any setup module exactly as this process does."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def check_program(program: Path, program_name: str, data: list[Path], report: Path,
                  backend_setup: tuple[str, ...], timeout_s: float,
                  load_methods: bool = True) -> LoadCheckResult:
    """load_methods=False is for programs whose delegates cannot initialize on this host: the
    child then only opens (fully verifies) the program, and the result carries no methods."""
    request = {"program": str(program), "data": [str(p) for p in data],
               "backend_setup": list(backend_setup), "report": str(report),
               "load_methods": load_methods}
    child = subprocess.Popen([sys.executable, "-m", "service.load_check", json.dumps(request)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env=_child_env(), start_new_session=True)
    try:
        _, stderr = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        _, stderr = child.communicate()
        return _refused(program_name, "program.load_timeout",
                        f"loading the program did not finish within {timeout_s:g} s "
                        f"(the check process was killed){_tail(stderr)}")
    try:
        outcome = json.loads(report.read_text())
    except (FileNotFoundError, ValueError):
        if child.returncode < 0:
            how = f"was killed by signal {signal.Signals(-child.returncode).name}"
        else:
            how = f"exited with status {child.returncode} without a report"
        return _refused(program_name, "program.load_crashed",
                        f"the process loading the program {how}{_tail(stderr)}")
    finally:
        report.unlink(missing_ok=True)
    if outcome["ok"]:
        return LoadCheckResult(outcome["methods"], [])
    return _refused(outcome.get("file") or program_name, "program.load_failed", outcome["error"])


def _tail(stderr: bytes) -> str:
    text = stderr.decode("utf-8", "replace").strip()
    return f"; it reported: {text[-_STDERR_TAIL:]}" if text else ""


def _refused(file: str, rule: str, message: str) -> LoadCheckResult:
    return LoadCheckResult([], [Problem(file, rule, message)])


def _child(request: dict) -> dict:
    from service.native import import_host

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


def main() -> None:
    request = json.loads(sys.argv[1])
    outcome = _child(request)
    report = Path(request["report"])
    temporary = report.with_suffix(".tmp")
    temporary.write_text(json.dumps(outcome))
    os.replace(temporary, report)


if __name__ == "__main__":
    main()
