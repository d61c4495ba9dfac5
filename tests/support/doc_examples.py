"""The examples of README.md and docs/: every shell and Python block with the marker before it
that says whether CI runs it, and how one is run against a real server.

A block is marked by an HTML comment on the line before its fence (markdown renders neither):
`<!-- example: runs -->`, or `<!-- example: not run: <why> -->` where it cannot run here (a GPU,
a container engine, the default ports). A page whose examples need a server started with flags
says so once: `<!-- example-server: --allow-client-shm -->`; a page whose examples start from
the first model of the README (model.pte exported, deployed as `mymodel`) says
`<!-- example-setup: first-model -->`.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from support.server import REPO, TESTS

# Fence languages that are programs a reader runs; any other fence (json, text, yaml) is data.
PROGRAM_LANGUAGES = {"sh", "bash", "shell", "console", "python", "py"}
_FENCE = re.compile(
    r"^(?P<indent> *)```(?P<lang>[^\s`]*)[^\n]*\n(?P<code>.*?)^(?P=indent)```\s*$", re.M | re.S
)
_MARKER = re.compile(r"<!-- example: (?:(?P<runs>runs)|not run: (?P<reason>\S.*?)) -->")
# Markers stand on lines of their own (a marker quoted in a sentence is no marker).
_MARKER_LINE = re.compile(r"^ *<!-- example: .*-->$", re.M)
_SERVER = re.compile(r"^<!-- example-server: (?P<args>.*?) -->$", re.M)
_SETUP = re.compile(r"^<!-- example-setup: (?P<name>[a-z-]+) -->$", re.M)
# A command in an indented (unfenced) code block: such a block has no language and no marker.
_INDENTED_COMMAND = re.compile(r"\n\n {4,}(?:\.venv|curl|python|bash|pip|docker|podman|kubectl)\b")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    code: str
    runs: bool
    reason: str | None  # why it does not run; None for runnable blocks and unmarked ones
    marked: bool

    @property
    def where(self) -> str:
        return f"{shown(self.page)}:{self.line}"

    @property
    def is_program(self) -> bool:
        return self.language in PROGRAM_LANGUAGES


def shown(page: Path) -> str:
    return str(page.relative_to(REPO)) if page.is_relative_to(REPO) else str(page)


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in _FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        marker = _MARKER.fullmatch(before)
        indent = len(match.group("indent"))
        code = "\n".join(line[indent:] for line in match.group("code").split("\n"))
        found.append(
            Block(
                page=page,
                line=text.count("\n", 0, match.start()) + 1,
                language=match.group("lang"),
                code=code,
                runs=bool(marker and marker.group("runs")),
                reason=marker.group("reason") if marker else None,
                marked=marker is not None,
            )
        )
    return found


def problems(page: Path) -> list[str]:
    """What keeps a page's examples from being checked: a program block without a marker, a
    fence without a language, a marker on no program, a command in an indented block."""
    found = []
    for block in blocks(page):
        if not block.language:
            found.append(f"{block.where}: a fence without a language (```sh, ```python, ```text)")
        elif block.is_program and not block.marked:
            found.append(
                f"{block.where}: a {block.language} block without `<!-- example: runs -->` or "
                "`<!-- example: not run: <why> -->` on the line before it"
            )
        elif block.marked and not block.is_program:
            found.append(f"{block.where}: an example marker on a {block.language} block")
    text = page.read_text()
    markers = len(_MARKER_LINE.findall(text))
    if markers != sum(b.marked for b in blocks(page)):
        found.append(f"{shown(page)}: an example marker not right before a fence")
    for match in _INDENTED_COMMAND.finditer(text):
        line = text.count("\n", 0, match.start()) + 3
        found.append(f"{shown(page)}:{line}: a command in an indented block: fence it")
    return found


def server_args(page: Path) -> list[str]:
    match = _SERVER.search(page.read_text())
    return shlex.split(match.group("args")) if match else []


def setup(page: Path) -> str | None:
    match = _SETUP.search(page.read_text())
    return match.group("name") if match else None


def run(block: Block, workdir: Path, http_port: int, grpc_port: int, env: dict, python: str):
    """Runs one block in workdir as a reader would, with the server's ports for the defaults."""
    code = block.code.replace("127.0.0.1:8000", f"127.0.0.1:{http_port}")
    code = code.replace("127.0.0.1:8001", f"127.0.0.1:{grpc_port}")
    if block.language in ("python", "py"):
        command = [python, "-c", code]
    else:
        command = ["bash", "-euo", "pipefail", "-c", code]
    return subprocess.run(
        command, cwd=workdir, env=env, capture_output=True, text=True, timeout=600
    )


def reader_env(base: dict, url: str) -> dict:
    """The environment of a reader's shell: the working tree's `service` ahead of the installed
    one (as every test server has it), and etrt pointed at the test's server."""
    env = {k: v for k, v in base.items() if not k.startswith("ETRT_")}
    env["PYTHONPATH"] = f"{REPO}:{TESTS}"
    env["ETRT_URL"] = url
    return env
