"""Load-check children die with their parent, and only recorded load-check children are reaped."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from service.ingest import child_guard
from support.load_check_faults import spawn_hanging_load_check
from support.server import REPO

# A parent that starts a child calling die_with_parent, prints the child's pid and exits at once.
_PARENT = textwrap.dedent("""
    import subprocess, sys
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], start_new_session=True,
                             stdout=subprocess.PIPE)
    print(child.pid, child.stdout.readline().decode().strip(), flush=True)
""")
_CHILD = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, {repo!r})
    from service.ingest import child_guard
    child_guard.die_with_parent(os.getppid())
    print("guarded", flush=True)
    time.sleep(60)
""")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _wait_dead(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return False


def test_the_child_is_killed_when_its_parent_exits():
    out = subprocess.run(
        [sys.executable, "-c", _PARENT, _CHILD.format(repo=str(REPO))],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    pid, state = out.split()
    assert state == "guarded"
    assert _wait_dead(int(pid)), "the child outlived its parent"


def test_a_child_whose_parent_is_already_gone_exits_at_once():
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from service.ingest import child_guard
        child_guard.die_with_parent(1)  # not our parent: as if the real one had died
        print("still running")
    """),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 70 and child.stdout == ""


def test_reaping_spares_processes_that_are_not_the_recorded_child(tmp_path):
    staging = tmp_path / "staging" / "upload"
    staging.mkdir(parents=True)
    other = subprocess.Popen(["sleep", "60"])
    # A load-check command line for another pid file is not ours either.
    foreign_file = staging / "other.child-pid"
    foreign = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "-m", "service.ingest.load_check"]
    )
    try:
        (staging / ".load_check.json.child-pid").write_text(str(other.pid))
        foreign_file.write_text(str(foreign.pid))
        (staging / "garbage.child-pid").write_text("not a pid")
        assert child_guard.reap_stale(tmp_path) == 0
        assert other.poll() is None and foreign.poll() is None
        assert not list(staging.glob("*.child-pid")), "pid files are consumed"
    finally:
        for process in (other, foreign):
            process.kill()
            process.wait()


def test_reaping_kills_the_recorded_load_check_child(tmp_path):
    staging = (tmp_path / "staging" / "upload").resolve()
    child, pid_file = spawn_hanging_load_check(staging, "unused.pte")
    try:
        assert int(pid_file.read_text()) == child.pid
        assert child_guard.reap_stale(tmp_path) == 1
        assert child.wait(timeout=5) < 0
        assert not pid_file.exists()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
