"""The dataplane's model table: each model name with its stored versions and the served ones.

A model holds numbered versions (service.store); its `version_policy` (the configuration of its
highest stored version, service.model_config.version_policy) selects which are served, and of those
the ones that can run here and were not unloaded are. An unversioned request goes to the highest
served version. Every lookup of a version names the model and the version when it fails, so a
client can tell an unknown version from an unserved one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from service.dataplane.model_pool import ModelPool
from service.dataplane.signature import signature_of
from service.dataplane.types import MethodSignature
from service.errors import NotFound, Unavailable, clip
from service.model_config.version_policy import MAX_VERSION, served_versions
from service.store.records import StoredModel

# Why a version that is stored and could serve does not: the repository API unloaded it.
UNLOADED = "unloaded"


# Lane route ids (service/engine/lane_routes.py) are never reused: a request naming one that
# stopped serving must not reach another version or model.
_route_ids = itertools.count(1)


@dataclass
class Served:
    stored: StoredModel
    pool: ModelPool
    signatures: dict[str, MethodSignature]
    schedulers: dict = field(default_factory=dict)  # method -> its scheduling Policy, on first use
    # method -> the id of its route in the engine's native lane, for as long as this serves.
    routes: dict[str, int] = field(default_factory=dict)

    @property
    def max_batch(self) -> int:
        return self.stored.description.effective_config.max_batch

    @property
    def version(self) -> str:
        return str(self.stored.version)


def serve(stored: StoredModel, pool: ModelPool) -> Served:
    signatures = {m: signature_of(pool.meta(m)) for m in pool.method_names}
    return Served(stored, pool, signatures, routes={m: next(_route_ids) for m in signatures})


def parse_version(name: str, version: str | int | None) -> int | None:
    """The version number a route or message names (None or "": unversioned)."""
    if version is None or version == "":
        return None
    text = str(version)
    if text.isascii() and text.isdigit() and len(text) <= 20 and 1 <= int(text) <= MAX_VERSION:
        return int(text)
    raise NotFound(
        f"model {clip(name)!r} has no version {clip(text)!r} (versions are numbers from 1)"
    )


@dataclass
class Model:
    """One model name: every stored version, the served ones, and why the others are not."""

    name: str
    stored: dict[int, StoredModel] = field(default_factory=dict)
    served: dict[int, Served] = field(default_factory=dict)
    # Stored versions the policy selects but that do not serve, with why (unloaded, cannot run
    # here, failed to open or warm up).
    reasons: dict[int, str] = field(default_factory=dict)
    unloaded: set[int] = field(default_factory=set)

    @property
    def newest(self) -> StoredModel:
        return self.stored[max(self.stored)]

    @property
    def policy(self) -> dict | None:
        config = self.newest.description.config
        return config.version_policy if config is not None else None

    def selected(self) -> list[int]:
        """The stored versions the version policy serves."""
        return served_versions(self.policy, self.stored)

    def default(self) -> Served | None:
        """What an unversioned request runs on: the highest served version."""
        return self.served[max(self.served)] if self.served else None

    def reason(self, version: int) -> str | None:
        """Why a stored version does not serve (None: it does)."""
        if version in self.served:
            return None
        if version in self.reasons:
            return self.reasons[version]
        return f"version {version} is not served (version_policy {_policy_text(self.policy)})"

    def unavailable_reason(self) -> str:
        """Why the model as a whole serves nothing: its newest selected version's reason."""
        selected = self.selected()
        return self.reason(selected[-1] if selected else max(self.stored))

    def stored_version(self, version: int | None) -> StoredModel:
        """A stored version (None: the default one, else the newest stored); NotFound naming
        model and version otherwise."""
        if version is None:
            served = self.default()
            return served.stored if served is not None else self.newest
        stored = self.stored.get(version)
        if stored is None:
            raise NotFound(
                f"model {clip(self.name)!r} has no version {version} "
                f"(versions: {', '.join(map(str, sorted(self.stored)))})"
            )
        return stored

    def served_version(self, version: int | None) -> Served:
        """What a request for `version` runs on; NotFound for a version not stored,
        Unavailable (with why) for one stored but not served."""
        if version is None:
            served = self.default()
            if served is None:
                raise Unavailable(
                    f"model {self.name!r} is unavailable: {self.unavailable_reason()}"
                )
            return served
        served = self.served.get(version)
        if served is None:
            self.stored_version(version)
            raise NotFound(
                f"model {clip(self.name)!r} version {version} is not served: {self.reason(version)}"
            )
        return served


def _policy_text(policy: dict | None) -> str:
    if not policy or "latest" in policy:
        return f"latest {(policy or {}).get('latest', {}).get('num_versions', 1)}"
    if "all" in policy:
        return "all"
    return f"specific {policy['specific']['versions']}"
