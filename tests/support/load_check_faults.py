"""Backend-setup hooks that make the load-check child crash or hang, to test how it is contained,
and isolated-work functions (service.ingest.IsolatedWork) that answer, fail, crash or hang.

The setup hooks act only inside the load-check child (`python -m service.ingest.load_check`), so a
server started with one of them still runs; only its uploads' isolated checks misbehave.
"""

import os
import sys
import time


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
