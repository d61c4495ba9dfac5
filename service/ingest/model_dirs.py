"""Read-only model directories: the models an operator lays out on disk instead of uploading.

Two layouts: DIR/<name>/ holding one .pte, its .ptd files and optionally config.json (one model
per folder, named by it), or -- KServe's single-model layout, `--model-name NAME` -- DIR itself
holding them. Each entry is copied into a staging directory and goes through the same ingest as an
upload, so a directory can never hold a model the upload API would refuse; the directory itself
is only read (it is often a read-only volume, and other servers may read it too).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from service import rules
from service.errors import Problem
from service.ingest.staging import StagedUpload, Staging, read_chunks
from service.model_config.parse import parse_model_config
from service.model_config.records import NO_CONFIG
from service.store.digests import file_sha256
from service.store.records import DATA, PROGRAM, StoredModel

CONFIG_FILE = rules.CONFIG_JSON
log = logging.getLogger(__name__)


def find_entries(dirs: tuple[Path, ...], model_name: str | None) -> list[tuple[str, Path]]:
    """(model name, folder) of every entry; folders without a .pte are not models and skipped.
    A missing directory is an operator's error, raised at start."""
    for directory in dirs:
        if not Path(directory).is_dir():
            raise RuntimeError(f"model directory {directory} does not exist or is not a folder")
    if model_name is not None:
        return [(model_name, Path(dirs[0]))]
    entries: dict[str, Path] = {}
    for directory in dirs:
        for folder in sorted(Path(directory).iterdir()):
            if not folder.is_dir():
                continue
            if not any(folder.glob("*.pte")):
                log.info("skipping %s: it holds no .pte program", folder)
            elif folder.name in entries:  # one name, one model: the first directory given wins
                log.error(
                    "skipping %s: model %s is already served from %s",
                    folder,
                    folder.name,
                    entries[folder.name],
                )
            else:
                entries[folder.name] = folder
    return list(entries.items())


def _files(folder: Path) -> list[tuple[str, Path]]:
    """(role, path) of the entry's program and data files, in name order."""
    files = []
    for path in sorted(folder.iterdir()):
        if path.is_file() and path.suffix == ".pte":
            files.append((PROGRAM, path))
        elif path.is_file() and path.suffix == ".ptd":
            files.append((DATA, path))
    return files


def _config(folder: Path) -> tuple[dict | None, list[Problem]]:
    path = folder / CONFIG_FILE
    if not path.is_file():
        return None, []
    try:
        config = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        return None, [
            Problem(CONFIG_FILE, rules.CONFIG_INVALID, f"{CONFIG_FILE} is not JSON: {exc}")
        ]
    if not isinstance(config, dict):
        return None, [
            Problem(CONFIG_FILE, rules.CONFIG_INVALID, f"{CONFIG_FILE} must be an object")
        ]
    return config, []


def stage_folder(staging: Staging, name: str, folder: Path) -> StagedUpload:
    """Copies an entry into the staging (replacing any stored model of its name)."""
    try:
        config, problems = _config(folder)
        for role, path in _files(folder):
            staging.add_file(role, path.name, read_chunks(path))
        return staging.commit(name, True, config, problems)
    except BaseException:
        staging.abort()
        raise


def unchanged(stored: StoredModel, folder: Path) -> bool:
    """Whether the stored model is this entry as it is now (same files, same bytes, same
    config), so a restart does not check every directory model again."""
    given, problems = _config(folder)
    config, problems = (None, problems) if problems else parse_model_config(given)
    if problems or (config or NO_CONFIG) != stored.description.effective_config:
        return False
    on_disk = sorted((role, path.name, path.stat().st_size) for role, path in _files(folder))
    known = sorted((f.role, f.name, f.size) for f in stored.description.files)
    if on_disk != known:
        return False
    by_name = {f.name: f.sha256 for f in stored.description.files}
    return all(file_sha256(path)[0] == by_name[path.name] for _, path in _files(folder))
