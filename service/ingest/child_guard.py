"""Keeps load-check children from outliving the server that started them.

A child runs in its own session (so a time-out can kill its whole process group), which also
means nothing kills it when the server dies: a hanging child would hold its CPU, memory and GPU
context for as long as it hangs. Two guards:

- the child asks the kernel for SIGKILL when its parent dies (Linux PR_SET_PDEATHSIG), then checks
  that the parent is still the server that started it, since it may have died before the request
  took effect;
- the child records its pid in a file next to its report; at start, before the staging area is
  cleared, the server kills every recorded process that is still a load-check child for that very
  file (its command line says so), whatever killed the previous server.

Both are no-ops where the platform lacks them (no prctl, no /proc).
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
from pathlib import Path

log = logging.getLogger(__name__)

PID_SUFFIX = ".child-pid"
_PR_SET_PDEATHSIG = 1
_CHILD_MODULE = "service.ingest.load_check"


def pid_file_for(report: Path) -> Path:
    return report.with_name(report.name + PID_SUFFIX)


def die_with_parent(parent_pid: int) -> None:
    """First thing in the child: be killed with the parent, and exit if it is already gone."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the reaping at start remains
        pass
    if os.getppid() != parent_pid:
        os._exit(70)


def record(pid_file: Path) -> None:
    temporary = pid_file.with_name(pid_file.name + ".tmp")
    temporary.write_text(str(os.getpid()))
    os.replace(temporary, pid_file)


def _child_command(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def _is_child_for(pid: int, pid_file: Path) -> bool:
    """A pid can be reused by any process: only one running this module for this very pid file
    is ours."""
    argv = _child_command(pid)
    if not argv or len(argv) < 4 or argv[1:3] != ["-m", _CHILD_MODULE]:
        return False
    try:
        return json.loads(argv[3]).get("pid_file") == str(pid_file)
    except (ValueError, AttributeError):
        return False


def reap_stale(root: Path) -> int:
    """Kills the load-check children recorded under `root` that are still running; returns how
    many. Call before the staging area is cleared, while the pid files still exist."""
    killed = 0
    for pid_file in Path(root).rglob(f"*{PID_SUFFIX}"):
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):  # written half by a child that was killed meanwhile
            pid = 0
        if pid > 0 and _is_child_for(pid, pid_file):
            try:
                if os.getpgid(pid) == pid:  # its own session: take anything it started too
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
                killed += 1
                log.warning("killed load-check process %d left running by a previous server", pid)
            except ProcessLookupError:
                pass
        pid_file.unlink(missing_ok=True)
    return killed
