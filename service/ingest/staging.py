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
from service.model_config.version_policy import MAX_VERSION
from service.store.storage import StagingArea

ROLES = ("program", "data")


@dataclass
class StagedFile:
    name: str
    path: Path
    size: int
    sha256: str
    version: int | None = None  # the model version a repository load put it in


@dataclass
class StagedUpload:
    """An upload received into its own staging directory under names that are safe on disk.

    `config` is the per-model configuration sent with it (None when none was), carried into the
    model's description. `version` is the model version it becomes (None: the dataplane picks,
    1 for a new model). A repository load carries `versions` instead, each one staged in a
    directory of its own under `directory`, and the model then holds exactly those."""

    model_name: str
    replace: bool
    directory: Path
    program: StagedFile | None
    data: list[StagedFile]
    config: dict | None = None
    version: int | None = None
    versions: tuple[StagedUpload, ...] = ()

    @property
    def parts(self) -> tuple[StagedUpload, ...]:
        """Each version's own upload (this one, when it is not a repository load)."""
        return self.versions or (self,)


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

    def open_file(self, role: str, filename: str, version: int | None = None) -> StagedWriter:
        """For transports that push bytes (a multipart parser); finish() it before the next.
        A file of a `version` is staged in that version's own directory."""
        if role not in ROLES:
            raise ValueError(f"unknown file role {role!r}")
        self.close_open_file()
        index = len(self.programs) + len(self.data)
        folder = self.directory if version is None else self.directory / str(version)
        folder.mkdir(exist_ok=True)
        staged = StagedFile(filename, folder / f"part-{index}", 0, "", version)
        (self.programs if role == "program" else self.data).append(staged)
        if role == "data" and len(self.data) > self._settings.max_data_files:
            raise TooLarge(f"more than {self._settings.max_data_files} data files in one upload")
        limit = (
            self._settings.max_program_bytes if role == "program" else self._settings.max_data_bytes
        )
        self._open = StagedWriter(staged, limit)
        return self._open

    def add_file(
        self, role: str, filename: str, chunks: Iterable[bytes], version: int | None = None
    ) -> StagedFile:
        """For transports that hold or pull the bytes (v2 load, model directories)."""
        writer = self.open_file(role, filename, version)
        for chunk in chunks:
            writer.write(chunk)
        self._open = None
        return writer.finish()

    def close_open_file(self) -> None:
        if self._open is not None:
            self._open.close()
            self._open = None

    def program_count_problems(self) -> list[Problem]:
        problems = []
        for version in sorted({f.version for f in self.programs}, key=lambda v: v or 0):
            count = sum(f.version == version for f in self.programs)
            if count > 1:
                where = "the upload" if version is None else f"version {version} of the upload"
                problems.append(
                    Problem(
                        None,
                        rules.UPLOAD_PROGRAM_COUNT,
                        f"{where} has {count} 'program' files; send one",
                    )
                )
        return problems

    def commit(
        self,
        model_name: str,
        replace: bool,
        config: dict | None = None,
        problems: list[Problem] = (),
        version: int | None = None,
    ) -> StagedUpload:
        """Hands the received files to ingest; `problems` found by the transport refuse it.
        Files staged under versions (a repository load) become one upload per version."""
        self.close_open_file()
        problems = list(problems) + [p for p in self.program_count_problems() if p not in problems]
        if problems:
            self.abort()
            raise refused("upload refused", problems)
        versions = sorted({f.version for f in [*self.programs, *self.data]} - {None})
        parts = tuple(
            StagedUpload(
                model_name,
                replace,
                self.directory / str(v),
                next((f for f in self.programs if f.version == v), None),
                [f for f in self.data if f.version == v],
                config,
                v,
            )
            for v in versions
        )
        unversioned = [f for f in self.programs if f.version is None]
        return StagedUpload(
            model_name,
            replace,
            self.directory,
            None if parts else (unversioned[0] if unversioned else None),
            [] if parts else [f for f in self.data if f.version is None],
            config,
            version,
            parts,
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


def file_role(key: str) -> tuple[int, str, str] | Problem:
    """(version, role, filename) of a file keyed as a model repository lays it out
    ("<version>/<filename>", as the v2 repository `load` overrides them; a bare filename is in
    version 1): the .pte is the program, .ptd files its data; a Problem for any other key."""
    folder, _, filename = key.rpartition("/")
    role = _role(filename)
    version = 1 if folder == "" else version_number(folder)
    if version is None:
        return Problem(
            clip(key),
            rules.LOAD_FILE_PATH,
            f"file {clip(key)!r} must be '<version>/<filename>' with a version number from 1 "
            f"to {MAX_VERSION}",
        )
    if role is None:
        return Problem(
            clip(key),
            rules.LOAD_FILE_KIND,
            f"file {clip(key)!r} is neither a .pte program nor a .ptd data file",
        )
    return version, role, filename


def version_number(text: str) -> int | None:
    if not (text.isascii() and text.isdigit()) or len(text) > 20:
        return None
    number = int(text)
    return number if 1 <= number <= MAX_VERSION else None


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
            place = file_role(key)
            if isinstance(place, Problem):
                problems.append(place)
            else:
                version, role, filename = place
                staging.add_file(role, filename, [content], version)
        return staging.commit(model_name, True, config, problems)
    except BaseException:
        staging.abort()
        raise


def stage_stored(staging: Staging, stored: list, config: dict | None) -> StagedUpload:
    """Stages a stored model's own files again (every version given), to re-ingest it with a
    new config."""
    try:
        for version in stored:
            staging.add_file(
                "program", version.program_name, read_chunks(version.program_path), version.version
            )
            for name, path in version.data_files:
                staging.add_file("data", name, read_chunks(path), version.version)
        return staging.commit(stored[0].name, True, config)
    except BaseException:
        staging.abort()
        raise
