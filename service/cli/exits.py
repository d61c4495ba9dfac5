"""The exit statuses of every `etrt` command, in one table: scripts and CI pipelines branch on
them, so each status means the same whatever the command (docs/etrt.md's table is generated
from EXITS and checked against it by tests/unit/test_cli_exits.py)."""

from __future__ import annotations

OK = 0
REFUSED = 1
NOT_HERE = 2
USAGE = 64  # sysexits' EX_USAGE: click's own 2 would read as NOT_HERE
INTERRUPTED = 130

EXITS = {
    OK: "done: the files would be accepted, the model serves, the server answered",
    REFUSED: "refused or failed: the files, the request or the server said no, or the server "
    "could not be reached (`error: ...` and each problem on stderr)",
    NOT_HERE: "not verifiable or not runnable here: `check` could not verify a TensorRT plan on "
    "this host, `deploy` stored a model that server cannot run",
    USAGE: "usage: an unknown option, a missing argument or file, a bad value "
    "(`error: ...` naming it on stderr)",
    INTERRUPTED: "interrupted (Ctrl-C)",
}
