"""Runs a model's methods on native-host instances.

Each method has N independent instances (own planned memory), so up to N requests to one method
run at once. Its gate hands them out (runtime_ext/lane/method_gate.h), to this pool and to the
engine's native lane alike; more requests queue there, waiting on the event loop rather than in a
worker thread (handoffs.py), so a model that is busy never ties up the threads other models need.
Inference runs in a worker thread (the native host releases the GIL while executing), except for
methods whose recent executes took less than `inline_below_s`: handing those to a thread and
back costs more than the execute itself (tens of microseconds against 2 for a small program), so
they run on the event loop, which they hold for about as long as a thread hop would.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Executor

import numpy as np

from service.dataplane import handoffs, residency
from service.dataplane.instances import InstancePlan
from service.store.records import StoredModel


class PoolClosed(Exception):
    """The model is being deleted or replaced and takes no new requests."""


class _MethodSlots:
    """A method's instances and their gate (ethost.LaneGate, runtime_ext/lane/method_gate.h),
    the one owner that hands them out, to this pool and to the engine's native lane alike."""

    def __init__(self, instances: list, gate):
        self.count = len(instances)
        self.instances = instances
        self.gate = gate

    @property
    def waiting(self) -> int:
        """Requests queued at the gate for an instance (the lane's included)."""
        return self.gate.waiters

    @property
    def recent_s(self) -> float | None:
        """Moving average of the execute time; None until the first execute (run in a thread).
        The shorter of each two counts: one execute stretched by a preemption (common on a busy
        host) would otherwise send the next few to threads for nothing."""
        recent_ns = self.gate.recent_ns
        return None if recent_ns < 0 else recent_ns * 1e-9

    def execute(
        self, index: int, inputs: list[np.ndarray], outputs: list | None = None, give_back=True
    ) -> list:
        """Runs instance `index`, claimed from the gate, which gets it back when the run ends
        (`give_back`; else the caller gives it back). `outputs`: memory per output to write it
        into (Method.execute's)."""
        instance = self.instances[index]
        try:
            return instance.execute(inputs, outputs, self.gate, give_back)
        finally:
            # The host's own measure: a clock around the call in a worker thread would count
            # the wait for the GIL too, which is long exactly when the server is busy.
            self.gate.observe(instance.last_run_ns)


class ModelPool:
    def __init__(
        self,
        model: StoredModel,
        ethost,
        plan: InstancePlan | int,
        kernel_threadpool: bool = False,
        inline_below_s: float = 0.0,
    ):
        self.model = model
        self.inline_below_s = inline_below_s
        self.program = ethost.Program(str(model.program_path), [str(p) for p in model.data_paths])
        self._methods = {}
        # Read from an instance: Program.method_meta would load one more instance of the method
        # (and initialize its delegates: TensorRT contexts, device buffers) just to describe it.
        self._metas = {}
        # (address, size) of every instance's host arenas, for memory(): fixed while it lives.
        self._arenas: list[tuple[int, int]] = []
        if isinstance(plan, int):  # that many per method
            plan = InstancePlan(plan, 0)
        program_bytes = sum(path.stat().st_size for path in (model.program_path, *model.data_paths))
        for name in self.program.method_names:
            instances = self.program.instances(name, plan.first)
            more = plan.more(program_bytes, instances[0].meta)
            if more:
                instances += self.program.instances(name, more)
            for instance in instances:
                instance.kernel_threadpool = kernel_threadpool
                buffers = instance.meta["planned_buffers"]
                self._arenas += [
                    (address, buffer["size"])
                    for address, buffer in zip(instance.arena_addresses(), buffers, strict=True)
                    if buffer["device"] == "cpu"
                ]
            self._methods[name] = _MethodSlots(instances, ethost.LaneGate(instances))
            self._metas[name] = instances[0].meta
        self._handoffs = handoffs.shared(ethost)
        # Seconds the model's warmups took before it served (service.dataplane.warmup).
        self.warmup_s: float | None = None
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.closed = False

    @property
    def method_names(self) -> list[str]:
        return list(self._methods)

    def meta(self, method: str) -> dict:
        return self._metas[method]

    def memory(self, files: dict[str, int] | None = None) -> residency.ModelMemory:
        """What of the model this process holds in RAM now; `files`: residency.mapped_files(),
        read once when several models are reported together."""
        paths = [self.model.program_path, *self.model.data_paths]
        return residency.measure(
            paths, self._arenas, residency.mapped_files() if files is None else files
        )

    def warm_up(self, method: str, inputs: list[np.ndarray], times: int) -> None:
        """Executes every instance of the method `times` times, before the pool serves (so no
        request holds an instance meanwhile); blocks: run it in a worker thread."""
        for instance in self._methods[method].instances:
            for _ in range(times):
                instance.execute(inputs)

    def waiting(self, method: str) -> int:
        """Requests to the method waiting for a free instance."""
        return self._methods[method].waiting

    def gate(self, method: str):
        """The method's ethost.LaneGate (see _MethodSlots)."""
        return self._methods[method].gate

    def instance_count(self, method: str) -> int:
        return self._methods[method].count

    async def run(
        self,
        method: str,
        inputs: list[np.ndarray],
        executor: Executor,
        acquired: Callable[[float], None] | None = None,
        timeout_s: float | None = None,
        outputs: list | None = None,
    ) -> list[np.ndarray]:
        """`acquired(seconds waited)` is called once an instance is free, so callers can tell
        waiting for an instance from running on one. Past `timeout_s` without a free instance,
        TimeoutError: the request was never executed. `outputs`: _MethodSlots.execute's."""
        self.admit()
        return await self.run_admitted(method, inputs, executor, acquired, timeout_s, outputs)

    def can_run_now(self, method: str) -> bool:
        """Whether run_now may execute the method: its recent executes are short enough to run
        inline and nobody is queued at its gate (no request jumps a line that is waiting)."""
        slots = self._methods[method]
        return (
            not self.closed
            and slots.waiting == 0
            and slots.recent_s is not None
            and slots.recent_s < self.inline_below_s
        )

    def run_now(self, method: str, inputs: list[np.ndarray], outputs: list | None = None):
        """Executes on the event loop at once, on an instance the gate hands out now: only
        right after can_run_now said so. None, with nothing run, when the gate has none free
        (the engine's lane holds them)."""
        slots = self._methods[method]
        index = slots.gate.claim()
        if index < 0:
            return None
        return slots.execute(index, inputs, outputs)

    def admit(self) -> None:
        """Counts a request as in flight until its run_admitted ends: close() waits for it.

        A scheduler admits a request when it queues it, so requests queued before a delete or
        replace are still served by this pool."""
        if self.closed:
            raise PoolClosed(self.model.name)
        self._enter()

    async def run_admitted(
        self,
        method: str,
        inputs: list[np.ndarray],
        executor: Executor,
        acquired: Callable[[float], None] | None = None,
        timeout_s: float | None = None,
        outputs: list | None = None,
    ) -> list[np.ndarray]:
        slots = self._methods[method]
        waiting_since = time.perf_counter()
        try:
            index = await self._handoffs.claim(slots.gate, timeout_s)
        except BaseException:
            self._leave()
            raise
        if index == handoffs.CLOSED:
            self._leave()
            raise PoolClosed(self.model.name)
        if acquired is not None:
            acquired(time.perf_counter() - waiting_since)

        release = self._releaser(slots, index)
        if slots.recent_s is not None and slots.recent_s < self.inline_below_s:
            try:
                return slots.execute(index, inputs, outputs, give_back=False)
            finally:
                release()
        future = asyncio.get_running_loop().run_in_executor(
            executor, slots.execute, index, inputs, outputs, False
        )
        future.add_done_callback(release)
        if outputs is None:
            return await asyncio.shield(future)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            # The thread writes into the caller's memory: a cancelled caller hears so only once
            # it is done (however often it is cancelled), so that nothing frees that memory
            # for others while it is written.
            while not future.done():
                try:
                    await asyncio.wait([future])
                except asyncio.CancelledError:
                    pass
            raise

    def start(self, method: str, inputs: list[np.ndarray], executor: Executor):
        """run_admitted() begun without a wait, for a scheduler that starts executes from
        callbacks (BatchingPolicy): the execute handed to a worker thread on an instance the
        gate hands out now; the future it answers ends with the execute, after the instance
        was given back and the admission ended. None, with nothing begun, when the gate has
        none free now or the method runs inline (run_admitted does either)."""
        slots = self._methods[method]
        if slots.recent_s is not None and slots.recent_s < self.inline_below_s:
            return None
        index = slots.gate.claim()
        if index < 0:
            return None
        future = asyncio.get_running_loop().run_in_executor(
            executor, slots.execute, index, inputs, None, False
        )
        future.add_done_callback(self._releaser(slots, index))
        return future

    def _releaser(self, slots: _MethodSlots, index: int) -> Callable:
        def release(_=None) -> None:
            # Runs when the execution really ends, even if the request was cancelled meanwhile,
            # so an instance is never handed out while a thread still executes it.
            slots.gate.release(index)
            self._leave()

        return release

    def readmit(self) -> None:
        """One more admission for a request already admitted and not yet done (a batch run
        again in parts): never refused while closing, since close() waits for that request."""
        self._enter()

    def withdraw(self) -> None:
        """Ends an admission that will not run (dropped from a queue, merged into a batch)."""
        self._leave()

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
        for slots in self._methods.values():
            slots.gate.close()
        await self._idle.wait()
