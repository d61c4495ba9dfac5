"""`python -m service.healthcheck`: the image's HEALTHCHECK, probing the port the server took.

A fixed port in the Dockerfile reported a server started with `--port 8080` (KServe's runtime)
unhealthy while it served. So the probe asks the running server itself: it finds the
`python -m service` process in /proc and parses that process's own arguments and environment
with the server's parser (service.config.parse_settings), so `--port`, Knative's `PORT`,
`ETRT_PORT` and the default give the port the server listens on, with no second reading of the
flags to drift.

Exit 0 when /health/ready answers 200; otherwise 1 and one line saying why (podman and Docker
keep it with the health state).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from service.config import parse_settings

PROC = Path("/proc")
# Addresses that mean "every interface": the probe goes to loopback of the same family.
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}


class ProbeError(Exception):
    pass


@dataclass(frozen=True)
class Target:
    pid: int
    url: str


def _cmdline(pid: int, proc: Path) -> list[str]:
    raw = (proc / str(pid) / "cmdline").read_bytes()
    return [part.decode(errors="replace") for part in raw.split(b"\0")[:-1]]


def server_arguments(cmdline: list[str]) -> list[str] | None:
    """The flags of a `python ... -m service FLAGS` command line; None for any other process
    (the server's own children run `-m service.engine` and `-m service.front`)."""
    for index, part in enumerate(cmdline[:-1]):
        if part == "-m" and cmdline[index + 1] == "service":
            return cmdline[index + 2 :]
    return None


def find_server(proc: Path = PROC) -> int:
    """The oldest `python -m service` process this user can see (a container has one)."""
    pids = sorted(int(entry.name) for entry in proc.iterdir() if entry.name.isdigit())
    for pid in pids:
        try:
            if server_arguments(_cmdline(pid, proc)) is not None:
                return pid
        except OSError:  # gone meanwhile, or another user's
            continue
    raise ProbeError("no `python -m service` process is running")


def target(pid: int, proc: Path = PROC) -> Target:
    try:
        arguments = server_arguments(_cmdline(pid, proc))
        raw_env = (proc / str(pid) / "environ").read_bytes()
    except OSError as exc:
        raise ProbeError(f"cannot read process {pid}: {exc.strerror}") from None
    if arguments is None:
        raise ProbeError(f"process {pid} is not `python -m service`")
    environ = dict(
        entry.decode(errors="replace").partition("=")[::2]
        for entry in raw_env.split(b"\0")
        if b"=" in entry
    )
    # The server started with these, so they parse; were it not so, say so in one line.
    with contextlib.redirect_stderr(io.StringIO()) as errors:
        try:
            settings = parse_settings(arguments, environ)
        except SystemExit:
            raise ProbeError(f"the server's flags do not parse: {errors.getvalue()}") from None
    host = _WILDCARDS.get(settings.host, settings.host)
    host = f"[{host}]" if ":" in host else host
    return Target(pid, f"http://{host}:{settings.port}/health/ready")


def probe(url: str, timeout: float) -> None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ProbeError(f"{url}: {reason}") from None
    if status != 200:
        raise ProbeError(f"{url} answered {status}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m service.healthcheck",
        description="exit 0 when the running server's /health/ready answers 200",
    )
    parser.add_argument("--pid", type=int, help="the server's process (default: found in /proc)")
    parser.add_argument("--timeout", type=float, default=4.0, help="seconds (default: 4)")
    args = parser.parse_args(argv)
    try:
        found = target(args.pid if args.pid is not None else find_server())
        probe(found.url, args.timeout)
    except ProbeError as exc:
        print(f"unhealthy: {exc}")
        return 1
    print(f"healthy: {found.url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
