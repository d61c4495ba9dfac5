"""ModelPool on the real native host: parallel instances, bounded concurrency, draining close."""

import asyncio
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from service.dataplane.model_pool import ModelPool, PoolClosed
from service.native_host import import_host
from service.store.records import ModelDescription, StoredFile, StoredModel
from support import programs

SIZE = 40_000


@pytest.fixture(scope="module")
def heavy(programs_dir):
    exported = programs.export_cpu_heavy(programs_dir, rounds=300, size=SIZE)
    description = ModelDescription("m", (StoredFile("program.pte", "program", 0, ""),), ())
    return exported, StoredModel("heavy", exported.pte.parent, description)


class CountingExecutor(ThreadPoolExecutor):
    """Records how many executions were in worker threads at once."""

    def __init__(self):
        super().__init__(8)
        self.running = 0
        self.most = 0
        self.lock = threading.Lock()

    def submit(self, fn, *args):
        def counted():
            with self.lock:
                self.running += 1
                self.most = max(self.most, self.running)
            try:
                return fn(*args)
            finally:
                with self.lock:
                    self.running -= 1

        return super().submit(counted)


@pytest.mark.parametrize("instances", [1, 2, 3])
def test_at_most_n_executions_run_at_once_each_on_its_own_instance(heavy, instances):
    exported, stored = heavy
    x = np.random.rand(SIZE).astype(np.float32)
    pool = ModelPool(stored, import_host(), instances)

    async def main(executor):
        return await asyncio.gather(*[pool.run("forward", [x], executor) for _ in range(6)])

    with CountingExecutor() as executor:
        results = asyncio.run(main(executor))
    assert executor.most == instances
    expected = exported.module(torch.from_numpy(x)).numpy()
    for [output] in results:
        np.testing.assert_allclose(output, expected, rtol=1e-5, atol=1e-5)


def test_close_waits_for_running_requests_and_refuses_new_ones(heavy):
    _, stored = heavy
    x = np.random.rand(SIZE).astype(np.float32)

    async def main(executor):
        pool = ModelPool(stored, import_host(), 1)
        running = [asyncio.create_task(pool.run("forward", [x], executor)) for _ in range(3)]
        await asyncio.sleep(0.05)
        await pool.close()
        # Each execution takes ~0.1 s: had close not waited, some would still be running.
        _, pending = await asyncio.wait(running, timeout=0.02)
        assert not pending
        with pytest.raises(PoolClosed):
            await pool.run("forward", [x], executor)
        return [task.result()[0].shape for task in running]

    with ThreadPoolExecutor(2) as executor:
        assert asyncio.run(main(executor)) == [(SIZE,)] * 3


def test_cancelled_request_keeps_its_instance_until_execution_ends(heavy):
    _, stored = heavy
    x = np.random.rand(SIZE).astype(np.float32)

    async def main(executor):
        pool = ModelPool(stored, import_host(), 1)
        first = asyncio.create_task(pool.run("forward", [x], executor))
        await asyncio.sleep(0.02)
        first.cancel()
        # Without waiting for the cancelled execution, this would reach a busy instance.
        second = await pool.run("forward", [x], executor)
        await pool.close()
        return second

    with ThreadPoolExecutor(2) as executor:
        assert asyncio.run(main(executor))[0].shape == (SIZE,)


def test_a_cancelled_request_writing_into_memory_hears_so_once_the_thread_is_done(heavy):
    """Its memory (a front's arena slot) is freed for other requests once it is answered, so a
    cancelled run that writes into it must not end while the thread still writes there; one
    without destinations ends at once, its thread finishing on its own."""
    _, stored = heavy
    x = np.random.rand(SIZE).astype(np.float32)
    destination = np.zeros(SIZE * 4, np.uint8)

    async def cancelled_run(pool, executor, outputs):
        task = asyncio.create_task(pool.run("forward", [x], executor, outputs=outputs))
        await asyncio.sleep(0.02)  # it executes in a thread now (~0.1 s)
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()  # twice: the wait must hold through both
        with pytest.raises(asyncio.CancelledError):
            await task
        return pool._idle.is_set()  # no request in flight: its thread ended

    async def main(executor):
        pool = ModelPool(stored, import_host(), 1)
        without = await cancelled_run(pool, executor, None)
        while not pool._idle.is_set():  # its thread still runs
            await asyncio.sleep(0.01)
        written = await cancelled_run(pool, executor, [destination])
        [expected] = await pool.run("forward", [x], executor)
        await pool.close()
        return without, written, expected

    with ThreadPoolExecutor(2) as executor:
        without, written, expected = asyncio.run(main(executor))
    assert not without and written
    np.testing.assert_array_equal(destination.view(np.float32).reshape(expected.shape), expected)


@pytest.mark.parametrize("kernel_threadpool", [False, True])
def test_instances_take_the_configured_kernel_threading(heavy, kernel_threadpool):
    exported, stored = heavy
    pool = ModelPool(stored, import_host(), 2, kernel_threadpool=kernel_threadpool)
    slots = pool._methods["forward"].instances
    assert [m.kernel_threadpool for m in slots] == [kernel_threadpool] * 2


def test_opening_a_pool_loads_exactly_n_instances_per_method(programs_dir, tmp_path):
    # Describing a method must not load one more instance: each would hold its own TensorRT
    # contexts and device buffers for nothing. Delegate instances are visible as counters.
    from support.test_backend_setup import install_test_backend
    from support.trt_programs import export_trt_program

    install_test_backend()
    import ethost_tensorrt

    exported = export_trt_program(programs_dir, "mixed", 256)
    shutil.copy(exported.pte, tmp_path / "program.pte")
    description = ModelDescription("m", (StoredFile("program.pte", "program", 0, ""),), ())
    stored = StoredModel("trt", tmp_path, description)
    before = {d["delegate"] for d in ethost_tensorrt.staging_counters()}
    pool = ModelPool(stored, import_host(), 3)
    assert pool.meta("forward")["delegates"] == ["TensorRTBackend", "TensorRTBackend"]
    created = {d["delegate"] for d in ethost_tensorrt.staging_counters()} - before
    assert len(created) == 3 * 2  # 3 instances x 2 delegates


def test_delegate_instances_are_named_by_the_thread_that_creates_them(programs_dir, tmp_path):
    """The owner set for a thread names every delegate instance it creates, with its method and
    its ordinal among its method instance's TensorRT delegates; other threads are unaffected."""
    from support.test_backend_setup import install_test_backend
    from support.trt_programs import export_trt_program

    install_test_backend()
    import ethost_tensorrt

    exported = export_trt_program(programs_dir, "mixed", 256)
    shutil.copy(exported.pte, tmp_path / "program.pte")
    description = ModelDescription("m", (StoredFile("program.pte", "program", 0, ""),), ())
    stored = StoredModel("trt", tmp_path, description)
    pools = {}

    def open_pool(owner):
        ethost_tensorrt.set_instance_owner(owner)
        try:
            pools[owner] = ModelPool(stored, import_host(), 2)
        finally:
            ethost_tensorrt.set_instance_owner("")

    threads = [threading.Thread(target=open_pool, args=(owner,)) for owner in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    named = sorted(
        (d["owner"], d["method"], d["ordinal"])
        for d in ethost_tensorrt.staging_counters()
        if d["owner"] in ("a", "b")
    )
    # Per owner: 2 instances x the method's 2 TensorRT delegates (ordinals 0 and 1).
    assert named == sorted(
        [(owner, "forward", ordinal) for owner in ("a", "b") for ordinal in (0, 1)] * 2
    )


class SubmitCounter(ThreadPoolExecutor):
    def __init__(self):
        super().__init__(2)
        self.submitted = 0

    def submit(self, fn, *args):
        self.submitted += 1
        return super().submit(fn, *args)


@pytest.mark.parametrize("inline_below_s,threaded", [(0.0, 5), (60.0, 1)])
def test_methods_faster_than_the_threshold_run_on_the_event_loop(
    programs_dir, inline_below_s, threaded
):
    """The first execute always goes to a thread (nothing is known of the method yet); after
    that, a method whose executes took less than the threshold runs inline."""
    exported = programs.export_linear_relu(programs_dir)
    description = ModelDescription("m", (StoredFile("program.pte", "program", 0, ""),), ())
    stored = StoredModel("lin", exported.pte.parent, description)
    pool = ModelPool(stored, import_host(), 2, inline_below_s=inline_below_s)
    x = exported.example_inputs[0].numpy()
    expected = exported.module(exported.example_inputs[0]).detach().numpy()

    async def main(executor):
        return [await pool.run("forward", [x], executor) for _ in range(5)]

    with SubmitCounter() as executor:
        results = asyncio.run(main(executor))
    assert executor.submitted == threaded
    for [output] in results:
        np.testing.assert_allclose(output, expected, rtol=1e-5)


def test_memory_counts_the_arenas_of_every_instance_once_written(programs_dir):
    exported = programs.export_external_weights(programs_dir)
    files = (StoredFile("program.pte", "program", 0, ""),) + tuple(
        StoredFile(p.name, "data", 0, "") for p in exported.ptds
    )
    stored = StoredModel("w", exported.pte.parent, ModelDescription("w", files, ()))
    pool = ModelPool(stored, import_host(), 3)
    planned = sum(
        b["size"] for b in pool.meta("forward")["planned_buffers"] if b["device"] == "cpu"
    )
    before = pool.memory()
    assert planned > 0 and before.arena_bytes == 3 * planned
    asyncio.run(pool.run("forward", [np.ones((2, 6), np.float32)], ThreadPoolExecutor(1)))
    after = pool.memory()
    # One instance ran: its arenas were written, the other two's may still be untouched.
    assert after.arena_resident_bytes >= min(planned, 4096)
    # The weights were read where they are mapped: the .ptd's pages are resident.
    assert after.files_bytes > 0 and after.resident_bytes >= after.files_bytes


def test_run_now_is_offered_only_for_a_known_fast_method_with_a_free_instance(programs_dir):
    """The engine's shortcut (ModelPool.run_now) must never take an instance that is in use,
    a method not yet measured, or a pool that is closing."""
    exported = programs.export_linear_relu(programs_dir)
    description = ModelDescription("m", (StoredFile("program.pte", "program", 0, ""),), ())
    stored = StoredModel("lin", exported.pte.parent, description)
    x = exported.example_inputs[0].numpy()
    expected = exported.module(exported.example_inputs[0]).detach().numpy()
    slow = ModelPool(stored, import_host(), 1, inline_below_s=1e-12)
    fast = ModelPool(stored, import_host(), 1, inline_below_s=60.0)
    assert not fast.can_run_now("forward")  # nothing measured yet: the first run takes a thread

    async def main(executor):
        for pool in (slow, fast):
            await pool.run("forward", [x], executor)
        assert not slow.can_run_now("forward")  # its executes are above its threshold
        assert fast.can_run_now("forward")
        [output] = fast.run_now("forward", [x])
        np.testing.assert_allclose(output, expected, rtol=1e-5)
        # The instance is back: the pool's own path still finds it.
        [again] = await fast.run("forward", [x], executor)
        np.testing.assert_allclose(again, expected, rtol=1e-5)
        await fast.close()
        assert not fast.can_run_now("forward")

    with SubmitCounter() as executor:
        asyncio.run(main(executor))
    assert executor.submitted == 2  # one first run per pool, nothing else in a thread


def test_run_now_runs_nothing_while_the_only_instance_runs_in_a_thread(heavy):
    exported, stored = heavy
    x = np.random.rand(SIZE).astype(np.float32)
    pool = ModelPool(stored, import_host(), 1, inline_below_s=60.0)

    async def main(executor):
        await pool.run("forward", [x], executor)  # measured: far below 60 s
        pool.inline_below_s = 0.0  # the next run goes to a thread, holding the instance
        running = asyncio.ensure_future(pool.run("forward", [x], executor))
        await asyncio.sleep(0.01)
        pool.inline_below_s = 60.0
        busy = pool.run_now("forward", [x])
        await running
        return busy, pool.run_now("forward", [x])

    with ThreadPoolExecutor(2) as executor:
        busy, after = asyncio.run(main(executor))
    assert busy is None and after is not None


def test_run_now_runs_only_on_an_instance_the_gate_hands_out_and_never_passes_a_waiter(
    programs_dir,
):
    """The method's gate is the one owner of its instances: run_now takes one only when the gate
    has one free and nobody is queued for it; otherwise nothing runs."""
    exported = programs.export_linear_relu(programs_dir)
    description = ModelDescription("m", (StoredFile("program.pte", "program", 0, ""),), ())
    stored = StoredModel("lin", exported.pte.parent, description)
    pool = ModelPool(stored, import_host(), 2, inline_below_s=60.0)
    x = exported.example_inputs[0].numpy()
    slots = pool._methods["forward"]

    async def main(executor):
        await pool.run("forward", [x], executor)  # measured
        assert pool.can_run_now("forward")
        held = [slots.gate.claim(), slots.gate.claim()]  # both taken (the lane's, say)
        assert sorted(held) == [0, 1] and pool.run_now("forward", [x]) is None
        waiting = asyncio.ensure_future(pool.run("forward", [x], executor))
        await asyncio.sleep(0.05)
        queued = slots.waiting == 1 and not pool.can_run_now("forward")
        for index in held:
            slots.gate.release(index)  # the first goes to the request queued
        [output] = await waiting
        return queued, output, pool.run_now("forward", [x])

    with ThreadPoolExecutor(1) as executor:
        queued, output, now = asyncio.run(main(executor))
    assert queued and now is not None
    np.testing.assert_array_equal(now[0], output)


class _Timed:
    """An instance whose executes took what the test says."""

    def __init__(self):
        self.last_run_ns = 0

    def execute(self, inputs, outputs=None, gate=None, give_back=True):
        return []


def test_one_long_execute_does_not_move_a_method_off_the_loop_but_two_do():
    from service.dataplane.model_pool import _MethodSlots

    instance = _Timed()
    slots = _MethodSlots([instance], import_host().LaneGate([]))
    for took_s in (2e-6, 2e-6, 2e-6):
        instance.last_run_ns = int(took_s * 1e9)
        slots.execute(0, [])
    instance.last_run_ns = int(5e-3 * 1e9)  # preempted once
    slots.execute(0, [])
    assert slots.recent_s < 10e-6
    slots.execute(0, [])  # and again: the method really is slow now
    assert slots.recent_s > 500e-6
