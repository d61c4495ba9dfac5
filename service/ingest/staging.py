"""Receiving an upload's files into a staging directory, whatever transport carries them.

Multipart uploads, the v2 repository `load` and model directories all hand files to a Staging, so
the per-file limits, the digests and the clean-up on failure are the same for each. Files get
neutral names (part-N) because the names they arrived under have not passed the name rules yet;
ingest renames them once they have. A Staging that is aborted, or whose commit raises, leaves
nothing behind.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from service import rules
from service.config import Settings
from service.errors import Problem, TooLarge, clip, refused
from service.store.storage import StagingArea

ROLES = ("program", "data")


@dataclass
class StagedFile:
    name: str
    path: Path
    size: int
    sha256: str


@dataclass
class StagedUpload:
    """An upload received into its own staging directory under names that are safe on disk.

    `config` is the per-model configuration sent with it (None when none was), carried into the
    model's description."""

    model_name: str
    replace: bool
    directory: Path
    program: StagedFile | None
    data: list[StagedFile]
    config: dict | None = None


class StagedWriter:
    """One file being received: bytes go to disk as they come, checked against the role's limit."""

    def __init__(self, staged: StagedFile, limit: int):
        self.staged = staged
        self._limit = limit
        self._handle: BinaryIO | None = open(staged.path, "wb")
        self._digest = hashlib.sha256()

    def write(self, chunk: bytes) -> None:
        self.staged.size += len(chunk)
        if self.staged.size > self._limit:
            raise TooLarge(
                f"file {clip(self.staged.name)!r} is larger than the limit of {self._limit} bytes"
            )
        self._handle.write(chunk)
        self._digest.update(chunk)

    def finish(self) -> StagedFile:
        self.close()
        self.staged.sha256 = self._digest.hexdigest()
        return self.staged

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class Staging:
    """begin (the constructor) -> open_file/add_file per file -> commit or abort."""

    def __init__(self, storage: StagingArea, settings: Settings):
        self._storage = storage
        self._settings = settings
        self.directory = storage.new_staging_dir()
        self.programs: list[StagedFile] = []
        self.data: list[StagedFile] = []
        self._open: StagedWriter | None = None

    @property
    def settings(self) -> Settings:
        return self._settings

    def open_file(self, role: str, filename: str) -> StagedWriter:
        """For transports that push bytes (a multipart parser); finish() it before the next."""
        if role not in ROLES:
            raise ValueError(f"unknown file role {role!r}")
        self.close_open_file()
        index = len(self.programs) + len(self.data)
        staged = StagedFile(filename, self.directory / f"part-{index}", 0, "")
        (self.programs if role == "program" else self.data).append(staged)
        if role == "data" and len(self.data) > self._settings.max_data_files:
            raise TooLarge(f"more than {self._settings.max_data_files} data files in one upload")
        limit = (
            self._settings.max_program_bytes if role == "program" else self._settings.max_data_bytes
        )
        self._open = StagedWriter(staged, limit)
        return self._open

    def add_file(self, role: str, filename: str, chunks: Iterable[bytes]) -> StagedFile:
        """For transports that hold or pull the bytes (v2 load, model directories)."""
        writer = self.open_file(role, filename)
        for chunk in chunks:
            writer.write(chunk)
        self._open = None
        return writer.finish()

    def close_open_file(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None

    def program_count_problems(self) -> list[Problem]:
        if len(self.programs) > 1:
            return [
                Problem(
                    None,
                    rules.UPLOAD_PROGRAM_COUNT,
                    f"the upload has {len(self.programs)} 'program' files; send one",
                )
            ]
        return []

    def commit(
        self,
        model_name: str,
        replace: bool,
        config: dict | None = None,
        problems: list[Problem] = (),
    ) -> StagedUpload:
        """Hands the received files to ingest; `problems` found by the transport refuse it."""
        self.close_open_file()
        problems = list(problems) + [p for p in self.program_count_problems() if p not in problems]
        if problems:
            self.abort()
            raise refused("upload refused", problems)
        return StagedUpload(
            model_name,
            replace,
            self.directory,
            self.programs[0] if self.programs else None,
            self.data,
            config,
        )

    def abort(self) -> None:
        self.close_open_file()
        self._storage.discard(self.directory)


def read_chunks(path: Path, size: int = 1 << 20) -> Iterable[bytes]:
    with open(path, "rb") as source:
        while chunk := source.read(size):
            yield chunk


def _role(filename: str) -> str | None:
    return "program" if filename.endswith(".pte") else "data" if filename.endswith(".ptd") else None


def file_role(key: str, version: str = "1") -> tuple[str, str] | Problem:
    """(role, filename) of a file keyed as a model repository lays it out ("<version>/<filename>",
    as the v2 repository `load` overrides them): the .pte is the program, .ptd files its data;
    a Problem for any other key."""
    folder, _, filename = key.rpartition("/")
    role = _role(filename)
    if folder not in ("", version):
        return Problem(
            clip(key),
            rules.LOAD_FILE_PATH,
            f"file {clip(key)!r} must be '<version>/<filename>' with "
            f"version {version!r} (the model's only version)",
        )
    if role is None:
        return Problem(
            clip(key),
            rules.LOAD_FILE_KIND,
            f"file {clip(key)!r} is neither a .pte program nor a .ptd data file",
        )
    return role, filename


def stage_files(
    staging: Staging,
    model_name: str,
    files: dict[str, bytes],
    config: dict | None,
) -> StagedUpload:
    """Stages files keyed as file_role reads them. The model is replaced if it exists, as a
    repository load does."""
    problems = []
    try:
        for key, content in files.items():
            role = file_role(key)
            if isinstance(role, Problem):
                problems.append(role)
            else:
                staging.add_file(*role, [content])
        return staging.commit(model_name, True, config, problems)
    except BaseException:
        staging.abort()
        raise


def stage_stored(staging: Staging, stored, config: dict | None) -> StagedUpload:
    """Stages a stored model's own files again, to re-ingest it (with a new config)."""
    try:
        staging.add_file("program", stored.program_name, read_chunks(stored.program_path))
        for name, path in stored.data_files:
            staging.add_file("data", name, read_chunks(path))
        return staging.commit(stored.name, True, config)
    except BaseException:
        staging.abort()
        raise
