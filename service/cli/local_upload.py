"""Local files staged as an upload, so the server's own ingest can judge them offline.

Ingest renames the staged files to their final names inside the staging directory, so the files
are hard-linked there (copied across file systems): the user's files are never moved or changed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from service.ingest.staging import StagedFile, StagedUpload

CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _stage(source: Path, target: Path) -> StagedFile:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    return StagedFile(source.name, target, target.stat().st_size, sha256_of(target))


def stage_local(
    directory: Path,
    model_name: str,
    program: Path,
    data: list[Path],
    config: bytes | None,
) -> StagedUpload:
    """The files as `POST /models` would have staged them (neutral part-N names)."""
    staged_program = _stage(program, directory / "part-0")
    staged_data = [_stage(path, directory / f"part-{i + 1}") for i, path in enumerate(data)]
    return StagedUpload(model_name, False, directory, staged_program, staged_data, config)
