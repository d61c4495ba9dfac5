"""What a delegate backend brings to the server, in one object per backend.

A backend is an ExecuTorch delegate the native host can run (its id is the one programs name in
their delegate entries). Everything the server does differently per backend hangs off this
object, so adding a backend means adding a package under service/backends/, one entry in
service.backends.registry and its name in service.config.BACKEND_NAMES, and nothing in the
dataplane, ingest or protocols changes:

- setup: "module:function" that loads and registers its native library with the host; it runs in
  the server and in every ingest check child, which must see the same backends;
- check: the ingest check for its delegates (service.ingest.delegates.DelegateCheck), if any
  beyond loading the program in the check child;
- metrics: what it counts of its delegates, rendered with the server's metrics;
- description_fields: the keys its check puts in a delegate's "details" in model descriptions;
- loading: a context manager factory (description, instances per method, the server's
  settings) entered on the load
  thread around the creation of a model's instances: it may refuse the load first (TensorRT:
  GPU memory admission) and tell its delegates the model's configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


class BackendMetrics(Protocol):
    """Per-backend metrics; `open` wraps the opening of a model's pool (instances are created
    then), `forget` drops a deleted model's series, `families` are rendered on /metrics, and
    `describe` adds fields to a served model's description."""

    def open(self, model: str, open_pool: Callable): ...

    def forget(self, model: str) -> None: ...

    def families(self) -> list: ...

    def describe(self, model: str) -> dict: ...


@dataclass(frozen=True)
class Backend:
    name: str
    id: str
    setup: str
    device: str = "cpu"  # where its delegates execute ("cpu" or "gpu"), as Triton's kinds say
    check: Callable[[], Callable | None] = lambda: None
    metrics: Callable[[], BackendMetrics | None] = lambda: None
    description_fields: dict[str, str] = field(default_factory=dict)
    loading: Callable | None = None
