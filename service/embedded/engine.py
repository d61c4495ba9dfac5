"""The engine as a library: the one ModelService of a process, opened over a store or a model
repository, with typed calls for a program that embeds it (a Ray Serve replica, a notebook, a
batch job) instead of talking HTTP to a server.

It is the same engine the server runs: the engine process (service/engine/) opens an Engine and
serves the fronts' contract calls on its dataplane, so deploying, ingest's refusals, scheduling
(dynamic batching, priority levels, queue deadlines), statistics and metrics are one code path
whichever way a request arrives. Errors are service.errors' classes (NotFound, Invalid with its
problems, QueueFull, DeadlineExceeded, ...), the values the server turns into its bodies.

All calls are coroutines on the event loop that opened the engine; ModelService runs executes
and ingest on its own threads, so awaiting infer() never blocks the loop on a program.
"""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from service import oip
from service.config import Settings
from service.dataplane.service import ModelService
from service.dataplane.types import InferRequest, MethodSignature
from service.embedded.records import InferResult, ModelInfo, ModelStatistics
from service.embedded.tensors import to_tensor
from service.errors import ServiceError, Unavailable
from service.ingest.staging import read_chunks

# The file a program or data file is staged under when it is given as bytes.
_PROGRAM_NAME, _DATA_NAME = "model.pte", "data-{}.ptd"


class NotReady(Exception):
    """The engine cannot serve (not started, closed, or still loading its repository): what a
    health check reports (Ray Serve replaces a replica whose check_health raises)."""


class Engine:
    """`await Engine.open(store=...)` or `await Engine.open(repository=...)`, then `await
    engine.close()` (or `async with await Engine.open(...) as engine:`)."""

    def __init__(self, settings: Settings, keep_staging: bool = False):
        """Built, not started: the engine process wires its fronts' server to `dataplane` before
        start(), so they see every change from the first. Programs call open() instead."""
        self.settings = settings
        self.dataplane = ModelService(settings, keep_staging=keep_staging)
        self._scratch: tempfile.TemporaryDirectory | None = None

    @classmethod
    async def open(
        cls,
        store: str | Path | None = None,
        *,
        repository: str | Path | Sequence[str | Path] | None = None,
        settings: Settings | None = None,
        wait_ready: bool = True,
        **options,
    ) -> Engine:
        """Opens a store (`store`: an artifacts folder with its SQLite registry, as the server's
        --artifacts; created if absent), or serves the models of a model repository
        (`repository`: one or more model directories, read as the server's --model-dir reads
        them; they are not written to: without `store` the engine keeps its copy in a private
        temporary folder that close() removes). `options`: any other Settings field (e.g.
        instances_per_model=2, backends=("xnnpack",)); `settings` gives them all at once.
        `wait_ready`: return once the repository's models are loaded (each one serving or
        listed unavailable with why)."""
        base = settings or Settings()
        scratch = None
        if store is None and settings is None:
            scratch = tempfile.TemporaryDirectory(prefix="etrt-engine-")
            store = Path(scratch.name) / "artifacts"
        changes = dict(options)
        if store is not None:
            changes["artifacts"] = Path(store)
        if repository is not None:
            paths = [repository] if isinstance(repository, str | Path) else list(repository)
            changes["model_dirs"] = tuple(Path(p) for p in paths)
        engine = cls(dataclasses.replace(base, **changes))
        engine._scratch = scratch
        try:
            await engine.start()
            if wait_ready:
                await engine.wait_ready()
        except BaseException:
            await engine.close()
            raise
        return engine

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def start(self) -> None:
        """Opens the store and serves what it holds; a repository's models load in the
        background (ready says when they are done)."""
        await self.dataplane.start()

    async def close(self) -> None:
        """Stops serving after the requests in flight and releases the models."""
        if self.dataplane.storage is not None:
            await self.dataplane.stop()
            self.dataplane.storage = None
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None

    # -- health ----------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """The server's readiness: the store is open and the repository's models have loaded."""
        return self.dataplane.ready

    async def wait_ready(self, timeout_s: float | None = None) -> None:
        async with asyncio.timeout(timeout_s):
            while not self.dataplane.ready:
                await asyncio.sleep(0.02)

    def check_health(self) -> None:
        """Raises NotReady when the engine would answer /v2/health/ready with 503: starting,
        loading its repository, stopped, or its GPU context poisoned by a sticky CUDA error
        (service/dataplane/gpu_faults.py), which only a new process clears."""
        if not self.dataplane.ready:
            raise NotReady(self.dataplane.not_ready_reason())

    # -- models ----------------------------------------------------------------------------------

    async def deploy(
        self,
        name: str,
        program: str | Path | bytes,
        data: Sequence[str | Path | bytes] | Mapping[str, bytes] = (),
        *,
        config: dict | None = None,
        replace: bool = False,
        version: int | None = None,
    ) -> ModelInfo:
        """Deploys a program as `POST /models` does: the same staging, ingest checks and
        refusals (service.errors.Invalid listing each problem, Conflict when the model exists
        and neither `replace` nor a new `version` is given). `data`: the .ptd files, as paths,
        bytes, or {file name: bytes}."""
        upload = await asyncio.to_thread(self._stage, name, program, data, config, replace, version)
        view = await self.dataplane.deploy(upload)
        return await self._info(view)

    def _stage(self, name, program, data, config, replace, version):
        staging = self.dataplane.begin_staging()
        try:
            staging.add_file("program", *_file(program, _PROGRAM_NAME))
            items = data.items() if isinstance(data, Mapping) else enumerate(data)
            for key, content in items:
                default = key if isinstance(key, str) else _DATA_NAME.format(key)
                staging.add_file("data", *_file(content, default))
            return staging.commit(name, replace, config, version=version)
        except BaseException:
            staging.abort()
            raise

    async def models(self) -> list[ModelInfo]:
        """Every model the store holds (and repository entries ingest refused), by name."""
        return [await self._info(view) for view in await self.dataplane.list_models()]

    async def describe(self, name: str, version: str | int | None = None) -> ModelInfo:
        view = await self.dataplane.describe(name, None if version is None else str(version))
        return await self._info(view)

    async def delete(self, name: str, version: str | int | None = None) -> None:
        """The model, or one version; requests already running finish first."""
        await self.dataplane.delete(name, None if version is None else str(version))

    async def _info(self, view: dict) -> ModelInfo:
        methods: dict[str, MethodSignature] = {}
        if view.get("methods"):
            try:
                methods = await self.dataplane.signatures(view["name"], view.get("version"))
            except ServiceError:  # a version no longer served (deleted meanwhile)
                methods = {}
        return ModelInfo.from_description(view, methods)

    def instance_count(self, name: str, method: str = "forward") -> int:
        """How many requests the model's default version executes at once (its instances)."""
        served = self.dataplane._find(name, None)
        if served is None:
            raise Unavailable(f"model {name!r} is not served")
        return served.pool.instance_count(method)

    # -- inference -------------------------------------------------------------------------------

    async def infer(
        self,
        model: str,
        inputs: Sequence[object] | Mapping[str, object],
        *,
        method: str = "forward",
        version: str | int | None = None,
        outputs: Sequence[str] | None = None,
        priority: int | None = None,
        timeout_s: float | None = None,
        id: str | None = None,
    ) -> InferResult:
        """Runs one request through the model's scheduler (its dynamic batcher or priority
        queues, as configured). `inputs`: arrays by input name, or in the method's order;
        numpy arrays, host DLPack tensors, or CUDA tensors (__cuda_array_interface__ or DLPack),
        which the program reads in device memory (service/embedded/tensors.py). `priority`: the
        queue level of a model with priority levels; `timeout_s`: how long it may wait for an
        instance before it is refused (DeadlineExceeded) unexecuted."""
        named = inputs.items() if isinstance(inputs, Mapping) else ((None, v) for v in inputs)
        tensors, keep = [], []
        for name, value in named:
            tensor, owner = to_tensor(name, value)
            tensors.append(tensor)
            keep.append(owner)
        parameters = {} if priority is None else {oip.PRIORITY_PARAMETER: priority}
        request = InferRequest(
            model=model,
            inputs=tensors,
            method=method,
            version=None if version is None else str(version),
            id=id,
            outputs=list(outputs) if outputs is not None else None,
            parameters=parameters,
            timeout_s=timeout_s,
            protocol="embedded",
        )
        response = await self.dataplane.infer(request)
        # In this process the outputs are arrays of their own; a response that views memory it
        # must give back (on_release) is copied out first.
        copy = response.on_release is not None
        try:
            arrays = {t.name: np.array(t.array, copy=copy) for t in response.outputs}
        finally:
            response.release()
        del keep  # the inputs' memory may go once the request is answered
        return InferResult(model, response.version, response.method, arrays, response.id)

    # -- statistics and metrics ------------------------------------------------------------------

    async def statistics(
        self, model: str | None = None, version: str | int | None = None
    ) -> list[ModelStatistics]:
        """The statistics extension's entries: of one model (or version), or of every model."""
        entries = await self.dataplane.model_stats(model, None if version is None else str(version))
        return [ModelStatistics.from_entry(entry) for entry in entries]

    async def metrics_text(self) -> str:
        """The server's /metrics page (Prometheus text) for this engine."""
        return await self.dataplane.metrics_text()


def _file(content: str | Path | bytes, default_name: str) -> tuple[str, object]:
    """(file name, chunks) of a file given as a path or as bytes."""
    if isinstance(content, bytes | bytearray | memoryview):
        return default_name, [bytes(content)]
    path = Path(content)
    return path.name, read_chunks(path)
