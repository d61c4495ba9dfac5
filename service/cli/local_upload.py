"""Local files staged as an upload, so the server's own ingest can judge them offline.

Ingest renames the staged files to their final names inside the staging directory, so the files
are hard-linked there (copied across file systems): the user's files are never moved or changed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from service.ingest.staging import StagedFile, StagedUpload
from service.store.digests import file_sha256


def _stage(source: Path, target: Path) -> StagedFile:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    return StagedFile(source.name, target, target.stat().st_size, file_sha256(target)[0])


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
