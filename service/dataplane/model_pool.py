"""Runs a model's methods on native-host instances, off the event loop.

Each method has N independent instances (own planned memory), so up to N requests to one method
run at once; more wait on an asyncio semaphore, not in a worker thread, so a model that is busy
never ties up the threads other models need. Inference itself runs in a worker thread and the
native host releases the GIL while executing.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor
from typing import Callable

import numpy as np

from service.store.records import StoredModel


class PoolClosed(Exception):
    """The model is being deleted or replaced and takes no new requests."""


class _MethodSlots:
    def __init__(self, instances: list):
        self.free = list(instances)
        self.available = asyncio.Semaphore(len(instances))


class ModelPool:
    def __init__(self, model: StoredModel, ethost, instances_per_method: int,
                 kernel_threadpool: bool = False):
        self.model = model
        self.program = ethost.Program(str(model.program_path), [str(p) for p in model.data_paths])
        self._methods = {}
        # Read from an instance: Program.method_meta would load one more instance of the method
        # (and initialize its delegates: TensorRT contexts, device buffers) just to describe it.
        self._metas = {}
        for name in self.program.method_names:
            instances = self.program.instances(name, instances_per_method)
            for instance in instances:
                instance.kernel_threadpool = kernel_threadpool
            self._methods[name] = _MethodSlots(instances)
            self._metas[name] = instances[0].meta
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.closed = False

    @property
    def method_names(self) -> list[str]:
        return list(self._methods)

    def meta(self, method: str) -> dict:
        return self._metas[method]

    async def run(self, method: str, inputs: list[np.ndarray], executor: Executor,
                  acquired: Callable[[float], None] | None = None) -> list[np.ndarray]:
        """`acquired(seconds waited)` is called once an instance is free, so callers can tell
        waiting for an instance from running on one."""
        if self.closed:
            raise PoolClosed(self.model.name)
        slots = self._methods[method]
        self._enter()
        waiting_since = time.perf_counter()
        try:
            await slots.available.acquire()
        except BaseException:
            self._leave()
            raise
        instance = slots.free.pop()
        if acquired is not None:
            acquired(time.perf_counter() - waiting_since)
        future = asyncio.get_running_loop().run_in_executor(executor, instance.execute, inputs)

        def release(_) -> None:
            # Runs when the execution really ends, even if the request was cancelled meanwhile,
            # so an instance is never handed out while a thread still executes it.
            slots.free.append(instance)
            slots.available.release()
            self._leave()

        future.add_done_callback(release)
        return await asyncio.shield(future)

    def _enter(self) -> None:
        self._in_flight += 1
        self._idle.clear()

    def _leave(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle.set()

    async def close(self) -> None:
        """Refuses new requests and returns once the ones already running have finished."""
        self.closed = True
        await self._idle.wait()
