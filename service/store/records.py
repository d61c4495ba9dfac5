"""What the store keeps per model, as types of their own, and their stored (JSON) form.

The records are the server's internal state; the HTTP schemas (service.front.protocols.*) are
views of them, so a protocol can change its answer without changing what is stored, and the store
can change its form (RECORD_VERSION, with a migration in service.store.storage) without changing any
answer. Method descriptions stay plain dicts: they are what the native host reports of a method
and are passed through to every protocol as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from service.model_config.parse import stored_config
from service.model_config.records import NO_CONFIG, ModelConfig

PROGRAM_FILE = "program.pte"
PROGRAM, DATA = "program", "data"


@dataclass(frozen=True)
class StoredFile:
    name: str  # as uploaded (data files are stored under it; the program as PROGRAM_FILE)
    role: str  # PROGRAM or DATA
    size: int
    sha256: str

    def to_json(self) -> dict:
        return {"name": self.name, "role": self.role, "bytes": self.size, "sha256": self.sha256}

    @classmethod
    def from_json(cls, entry: dict) -> StoredFile:
        return cls(entry["name"], entry["role"], entry["bytes"], entry["sha256"])


@dataclass(frozen=True)
class ModelDescription:
    """What ingest found: the files, each method's signature and delegates, the warnings, and,
    when the model is stored but cannot run on this host, why not (`not_runnable`)."""

    name: str
    files: tuple[StoredFile, ...]
    methods: tuple[dict, ...]
    warnings: tuple[str, ...] = ()
    not_runnable: str | None = None
    config: ModelConfig | None = None

    @property
    def runnable(self) -> bool:
        return self.not_runnable is None

    @property
    def effective_config(self) -> ModelConfig:
        """What the model runs with: its configuration, the defaults where none was sent."""
        return self.config or NO_CONFIG

    def view(self, state: str, error: str | None = None) -> dict:
        """The description every protocol answers with (the native API's ModelDescription)."""
        view = {
            "name": self.name,
            "state": state,
            "runnable": self.runnable,
            "files": [f.to_json() for f in self.files],
            "methods": list(self.methods),
            "warnings": list(self.warnings),
        }
        if self.not_runnable is not None:
            view["unavailable_reason"] = self.not_runnable
        if error is not None:
            view["error"] = error
        if self.config is not None:
            view["config"] = self.config.to_json()
        return view

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "files": [f.to_json() for f in self.files],
            "methods": list(self.methods),
            "warnings": list(self.warnings),
            "not_runnable": self.not_runnable,
            "config": None if self.config is None else self.config.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict) -> ModelDescription:
        return cls(
            data["name"],
            tuple(StoredFile.from_json(f) for f in data["files"]),
            tuple(data["methods"]),
            tuple(data.get("warnings", ())),
            data.get("not_runnable"),
            stored_config(data.get("config")),
        )

    @classmethod
    def from_legacy(cls, view: dict) -> ModelDescription:
        """A row written before records were versioned held the API answer itself, with
        "runnable" and "unavailable_reason" in it."""
        not_runnable = view.get("unavailable_reason") if view.get("runnable") is False else None
        return cls(
            view["name"],
            tuple(StoredFile.from_json(f) for f in view.get("files", ())),
            tuple(view.get("methods", ())),
            tuple(view.get("warnings", ())),
            not_runnable,
            stored_config(view.get("config")),
        )


@dataclass(frozen=True)
class StoredModel:
    """One stored version of a model (a model holds one or more, numbered from 1)."""

    name: str
    directory: Path
    description: ModelDescription = field(repr=False)
    version: int = 1

    @property
    def program_path(self) -> Path:
        return self.directory / PROGRAM_FILE

    @property
    def program_name(self) -> str:
        return next(f.name for f in self.description.files if f.role == PROGRAM)

    @property
    def data_files(self) -> list[tuple[str, Path]]:
        """(uploaded name, path) of each data file, in upload order."""
        return [(f.name, self.directory / f.name) for f in self.description.files if f.role == DATA]

    @property
    def data_paths(self) -> list[Path]:
        return [path for _, path in self.data_files]

    def path_of(self, stored: StoredFile) -> Path:
        return self.program_path if stored.role == PROGRAM else self.directory / stored.name
