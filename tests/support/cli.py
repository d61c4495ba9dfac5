"""Runs the installed `etrt` console script in a subprocess, as a user's shell would.

The script is the one pip installed next to this interpreter; PYTHONPATH puts the working tree's
`service` (and the test helpers, for backend setups) ahead of the installed copy, as the server
processes of the e2e tests do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from support.server import REPO, TESTS

ETRT = Path(sys.executable).parent / "etrt"
TEST_BACKEND = "support.test_backend_setup:install_test_backend"


def etrt_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETRT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(TESTS)])
    env.update(extra or {})
    return env


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> dict:
        return json.loads(self.out)


def etrt(*args, env: dict | None = None, timeout: float = 300) -> Run:
    done = subprocess.run(
        [str(ETRT), *map(str, args)],
        env=etrt_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    return Run(done.returncode, done.stdout, done.stderr)
