"""Backend-setup hooks that make the load-check child crash or hang, to test how it is contained,
and isolated-work functions (service.ingest.delegates.IsolatedWork) that answer, fail, crash or
hang.

The setup hooks act only inside the load-check child (`python -m service.ingest.load_check`), so a
server started with one of them still runs; only its uploads' isolated checks misbehave.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

_REPO = Path(__file__).resolve().parents[2]


def _in_load_check_child() -> bool:
    return sys.argv[0].endswith(os.path.join("service", "ingest", "load_check.py"))


def abort_in_load_check() -> None:
    if _in_load_check_child():
        sys.stderr.write("load_check_faults: aborting on purpose\n")
        sys.stderr.flush()
        os.abort()


def hang_in_load_check() -> None:
    if _in_load_check_child():
        time.sleep(3600)


def slow_in_load_check() -> None:
    """Makes each upload's check take a few seconds, so a test can watch the server meanwhile."""
    if _in_load_check_child():
        time.sleep(3)


def answer_with_pid(request: dict) -> dict:
    return {**request, "pid": os.getpid()}


def fail_in_work(request: dict) -> dict:
    raise RuntimeError("refusing on purpose")


def abort_in_work(request: dict) -> dict:
    sys.stderr.write("load_check_faults: aborting in isolated work on purpose\n")
    sys.stderr.flush()
    os.abort()


def hang_in_work(request: dict) -> dict:
    time.sleep(3600)


def spawn_hanging_load_check(staging: Path, program: str) -> tuple[subprocess.Popen, Path]:
    """A load-check child hanging in `staging` (created here) as a server would have started it,
    in a session of its own; returned once it has written its pid file."""
    staging.mkdir(parents=True)
    pid_file = staging / ".load_check.json.child-pid"
    request = {
        "program": program,
        "data": [],
        "backend_setup": ["support.load_check_faults:hang_in_load_check"],
        "report": str(staging / ".load_check.json"),
        "load_methods": True,
        "parent": os.getpid(),
        "pid_file": str(pid_file),
    }
    path = os.pathsep.join([str(_REPO), str(_REPO / "tests")])
    child = subprocess.Popen(
        [sys.executable, "-m", "service.ingest.load_check", json.dumps(request)],
        env={**os.environ, "PYTHONPATH": path},
        cwd=_REPO,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not pid_file.exists():
        if time.monotonic() > deadline:
            child.kill()
            raise TimeoutError(f"the load-check child wrote no pid file in {staging}")
        time.sleep(0.02)
    return child, pid_file
