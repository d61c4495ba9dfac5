"""The contract between ingest and the backends' delegate checks, and nothing else.

A backend (service/backends/base.py) may bring a check for its delegates: a DelegateCheck,
called with each delegate of that backend and an IngestContext to look up named data, answering
a DelegateReport. A check that must call into its backend's own runtime on the uploaded bytes
(deserialize a plan) does not do it in the server: it returns that call as IsolatedWork, which
the pipeline runs in the upload's one check child (service/ingest/load_check.py).

It sits in ingest, below the backends, so that both import it downward: ingest is given the
enabled backends' checks (IngestBackends, built by service.backends.registry) and never looks
them up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from service.config import Settings
from service.errors import Problem
from service.ingest.inspection import DataFileInfo, DelegateInfo, MethodInfo, ProgramInfo


@dataclass
class IsolatedWork:
    """A call a delegate check needs made in the isolated check child, and what to do with it.

    `function` ("module:function") is called there with `request` (JSON) after the backend setup
    and returns a JSON-able answer, which `finish` turns into problems and details here. `doing`
    names the call in the problem if it crashes or hangs the child.
    """

    function: str
    request: dict
    finish: Callable[[dict], None]
    doing: str


@dataclass
class DelegateReport:
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)
    isolated: IsolatedWork | None = None


class IngestContext:
    """What a delegate check may consult; it records which named data was looked up."""

    def __init__(
        self,
        settings: Settings,
        program_name: str,
        program: ProgramInfo,
        program_path: Path,
        data_files: dict[str, tuple[Path, DataFileInfo]],
    ):
        self.settings = settings
        self.program_name = program_name
        self.program = program
        self.program_path = program_path
        self.data_paths = {name: path for name, (path, _) in data_files.items()}
        self.data_files = {name: info for name, (_, info) in data_files.items()}
        self.used_keys: set[str] = set()

    @property
    def allow_unverified_plans(self) -> bool:
        return self.settings.allow_unverified_plans

    def data_file_with(self, key: str) -> str | None:
        return next((name for name, info in self.data_files.items() if key in info.keys), None)

    def named_data_span(self, key: str) -> tuple[Path, int, int] | None:
        """(file, start, end) of a named-data entry, for isolated work to read."""
        self.used_keys.add(key)
        name = self.data_file_with(key)
        if name is None:
            return None
        start, end = self.data_files[name].span(key)
        return self.data_paths[name], start, end

    def method(self, name: str) -> MethodInfo:
        return next(m for m in self.program.methods if m.name == name)


DelegateCheck = Callable[[DelegateInfo, IngestContext], DelegateReport]


@dataclass(frozen=True)
class IngestBackends:
    """What ingest is given of the enabled backends: each one's delegate check by backend id, and
    the "module:function" setups that register them with the host in the check child (which must
    see the same backends as the server)."""

    checks: Mapping[str, DelegateCheck] = field(default_factory=dict)
    setups: tuple[str, ...] = ()
