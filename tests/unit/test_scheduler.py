"""The scheduling policies on real programs run by the native host: batches, queue bounds,
deadlines, priority order, the drain time a refusal names."""

import asyncio
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from service.dataplane.kernel_errors import is_input_fault, kernel_reason
from service.dataplane.metrics import Metrics
from service.dataplane.model_pool import ModelPool
from service.dataplane.scheduler import policy_for
from service.dataplane.scheduling.batching import BatchingPolicy
from service.dataplane.scheduling.direct import DirectPolicy
from service.dataplane.scheduling.priority import PriorityPolicy
from service.dataplane.statistics import Statistics
from service.errors import Busy, DeadlineExceeded, Invalid, QueueFull
from service.model_config.parse import parse_model_config
from service.native_host import import_host
from service.store.records import ModelDescription, StoredFile, StoredModel
from support import programs

HEAVY_SIZE = 40_000  # ~0.1-0.2 s per execute here


def _stored(exported, name="m"):
    description = ModelDescription(name, (StoredFile("program.pte", "program", 0, ""),), ())
    return StoredModel(name, exported.pte.parent, description)


@pytest.fixture(scope="module")
def batch_program(programs_dir):
    return programs.export_dynamic_batch(programs_dir)  # Linear(4, 3) + relu, batch 1..16


@pytest.fixture(scope="module")
def lookup_program(programs_dir):
    return programs.export_dynamic_lookup(programs_dir)


@pytest.fixture(scope="module")
def heavy_program(programs_dir):
    return programs.export_cpu_heavy(programs_dir, rounds=300, size=HEAVY_SIZE)


def batching(max_batch, delay_us=0, preferred=(), max_queue=0, timeout_us=0):
    return {
        "max_batch_size": max_batch,
        "dynamic_batching": {
            "max_queue_delay_microseconds": delay_us,
            "preferred_batch_size": list(preferred),
            "default_queue_policy": {
                "max_queue_size": max_queue,
                "default_timeout_microseconds": timeout_us,
            },
        },
    }


def configured(given: dict):
    config, problems = parse_model_config(given)
    assert problems == [], problems
    return config


def run(exported, given, scenario, instances=1):
    """Runs scenario(scheduler, metrics) on a fresh pool, with the policy the configuration
    `given` asks for; returns its result."""
    config = configured(given)

    async def main():
        with ThreadPoolExecutor(4) as executor:
            pool = ModelPool(_stored(exported), import_host(), instances)
            metrics = Metrics()
            scheduler = policy_for(config)(
                "m", "forward", pool, config, executor, metrics, Statistics(), "1"
            )
            try:
                return await scenario(scheduler, metrics)
            finally:
                await pool.close()

    return asyncio.run(main())


def counted(scheduler) -> dict:
    """The statistics the scheduler recorded: execution_count, inference_count and
    batch_stats as {batch size: {"count": executes}}."""
    stats = scheduler._statistics.model_stats("m", "1")
    sizes = {}
    for entry in stats["batch_stats"]:
        phases = {entry[p]["count"] for p in ("compute_input", "compute_infer", "compute_output")}
        assert len(phases) == 1, entry  # every phase of every execute is counted
        sizes[entry["batch_size"]] = {"count": phases.pop()}
    return {
        "execution_count": stats["execution_count"],
        "inference_count": stats["inference_count"],
        "batch_stats": sizes,
    }


def eager(exported, array):
    return exported.module(torch.from_numpy(array)).detach().numpy()


def test_concurrent_requests_are_merged_and_each_gets_its_own_rows(batch_program):
    rng = np.random.default_rng(1)
    requests = [
        rng.standard_normal((int(rng.integers(1, 4)), 4)).astype(np.float32) for _ in range(40)
    ]

    async def scenario(scheduler, _):
        results = await asyncio.gather(*[scheduler.submit([x]) for x in requests])
        return results, counted(scheduler)

    results, stats = run(batch_program, batching(8, delay_us=20_000), scenario)
    for x, [output] in zip(requests, results):
        assert output.shape == (x.shape[0], 3)
        np.testing.assert_allclose(output, eager(batch_program, x), rtol=1e-5, atol=1e-6)
    sizes = stats["batch_stats"]
    assert max(sizes) <= 8
    assert sum(size * s["count"] for size, s in sizes.items()) == sum(len(x) for x in requests)
    # Triton counts every row of a batch as an inference.
    assert stats["inference_count"] == sum(len(x) for x in requests)
    assert stats["execution_count"] == sum(s["count"] for s in sizes.values())
    assert stats["execution_count"] < 40, "nothing was merged"


def test_mixed_trailing_shapes_are_never_merged(lookup_program):
    rng = np.random.default_rng(2)
    requests = [rng.integers(0, 10, (1, 3 if i % 2 else 5)).astype(np.int64) for i in range(16)]

    async def scenario(scheduler, _):
        return await asyncio.gather(*[scheduler.submit([ids]) for ids in requests]), counted(
            scheduler
        )

    results, stats = run(lookup_program, batching(16, delay_us=50_000), scenario)
    for ids, [output] in zip(requests, results):
        np.testing.assert_allclose(output, eager(lookup_program, ids), rtol=1e-5, atol=1e-6)
    # Two shapes of 8 requests each, all queued within the delay: one batch per shape.
    assert (
        stats["batch_stats"] == {8: stats["batch_stats"][8]}
        and stats["batch_stats"][8]["count"] == 2
    )


def test_a_request_the_kernel_refuses_fails_alone_and_its_batch_mates_are_answered(
    lookup_program,
):
    good = [np.array([[i % 10, 1]], np.int64) for i in range(6)]
    bad = np.array([[42, 1]], np.int64)  # past the 10-row table: the kernel refuses it
    worse = np.array([[77, 1]], np.int64)

    async def scenario(scheduler, _):
        first = await asyncio.gather(
            *[scheduler.submit([ids]) for ids in [*good[:3], bad, *good[3:], worse]],
            return_exceptions=True,
        )
        second = await asyncio.gather(*[scheduler.submit([ids]) for ids in good])
        return first, second, counted(scheduler), scheduler.pool._in_flight

    first, second, stats, in_flight = run(lookup_program, batching(8, delay_us=500_000), scenario)
    refused = [first[3], first[7]]
    assert all(is_input_fault(r) for r in refused), first
    assert "42" in kernel_reason(refused[0]) and "77" in kernel_reason(refused[1])
    answered = first[:3] + first[4:7]
    for ids, [output] in zip(good + good, answered + [o for o in second]):
        np.testing.assert_allclose(output, eager(lookup_program, ids), rtol=1e-5, atol=1e-6)
    # The 8 were merged; only successful executes count, each by its rows.
    assert stats["inference_count"] == 12 and in_flight == 0
    assert stats["execution_count"] < 12


def test_preferred_batch_size_is_sent_without_waiting_for_the_delay(batch_program):
    x = np.ones((1, 4), np.float32)

    async def scenario(scheduler, _):
        loop = asyncio.get_running_loop()
        begun = loop.time()
        await asyncio.gather(*[scheduler.submit([x]) for _ in range(4)])
        return loop.time() - begun, counted(scheduler)

    elapsed, stats = run(batch_program, batching(8, delay_us=2_000_000, preferred=[4]), scenario)
    assert elapsed < 1.0
    assert list(stats["batch_stats"]) == [4]


def test_a_batch_never_exceeds_max_batch_size_rows(batch_program):
    x = np.ones((3, 4), np.float32)

    async def scenario(scheduler, _):
        await asyncio.gather(*[scheduler.submit([x]) for _ in range(10)])
        return counted(scheduler)

    stats = run(batch_program, batching(8, delay_us=50_000), scenario)
    assert set(stats["batch_stats"]) == {6}  # two 3-row requests fit in 8, three do not
    assert stats["batch_stats"][6]["count"] == 5


def test_the_next_batch_starts_before_the_last_ones_requests_are_answered(batch_program):
    events = []

    async def scenario(scheduler, _):
        async def call(tag):
            x = np.full((1, 4), tag, np.float32)
            [output] = await scheduler.submit([x], acquired=lambda _: events.append(f"took {tag}"))
            events.append(f"answered {tag}")
            return output

        return await asyncio.gather(*[call(tag) for tag in range(4)])

    outputs = run(batch_program, batching(2), scenario)  # one instance: 2 batches of 2
    for tag, output in enumerate(outputs):
        x = np.full((1, 4), tag, np.float32)
        np.testing.assert_allclose(output, eager(batch_program, x), rtol=1e-5, atol=1e-6)
    # The second batch left the queue (and started) when the first one's execute ended, before
    # the first one's requests heard their answers.
    assert events.index("took 2") < events.index("answered 0"), events
    assert events.index("took 3") < events.index("answered 1"), events


def test_batches_in_flight_on_two_instances_stay_within_max_batch_and_answer_their_own(
    batch_program,
):
    rng = np.random.default_rng(7)
    requests = [
        rng.standard_normal((int(rng.integers(1, 4)), 4)).astype(np.float32) for _ in range(120)
    ]

    async def scenario(scheduler, _):
        async def call(x):
            await asyncio.sleep(float(rng.uniform(0, 0.01)))  # arrivals spread over the batches
            return await scheduler.submit([x])

        results = await asyncio.gather(*[call(x) for x in requests])
        return results, counted(scheduler), scheduler.pool._in_flight, scheduler._idle

    results, stats, in_flight, idle = run(batch_program, batching(8), scenario, instances=2)
    for x, [output] in zip(requests, results):
        np.testing.assert_allclose(output, eager(batch_program, x), rtol=1e-5, atol=1e-6)
    sizes = stats["batch_stats"]
    assert max(sizes) <= 8
    assert sum(size * s["count"] for size, s in sizes.items()) == sum(len(x) for x in requests)
    assert in_flight == 0 and idle == 2  # every admission ended, every instance given back


def test_a_request_cancelled_while_a_batch_runs_is_not_in_the_next_one(heavy_program):
    x = np.random.rand(HEAVY_SIZE).astype(np.float32)

    async def scenario(scheduler, _):
        first = asyncio.create_task(scheduler.submit([x]))
        await asyncio.sleep(0.01)  # it executes, on the one instance
        queued = [asyncio.create_task(scheduler.submit([x])) for _ in range(3)]
        await asyncio.sleep(0.01)
        assert scheduler.depth == 3
        queued[1].cancel()
        await asyncio.sleep(0)
        depth = scheduler.depth
        await asyncio.gather(first, queued[0], queued[2])
        return depth, counted(scheduler), scheduler.pool._in_flight, queued[1].cancelled()

    depth, stats, in_flight, cancelled = run(heavy_program, prioritized(), scenario)
    assert depth == 2 and cancelled and in_flight == 0
    assert stats["execution_count"] == 3  # the cancelled one never executed


def test_a_batch_waits_for_an_instance_another_user_of_the_gate_holds(batch_program):
    x = np.ones((1, 4), np.float32)

    async def scenario(scheduler, _):
        gate = scheduler.pool.gate("forward")
        held = gate.claim()  # as the engine's native lane would
        assert held >= 0
        task = asyncio.create_task(scheduler.submit([x]))
        await asyncio.sleep(0.05)
        waiting = not task.done()
        gate.release(held)
        [output] = await asyncio.wait_for(task, 5.0)
        return waiting, output, scheduler._idle, scheduler.pool._in_flight

    waiting, output, idle, in_flight = run(batch_program, batching(8), scenario)
    assert waiting and idle == 1 and in_flight == 0
    np.testing.assert_allclose(output, eager(batch_program, x), rtol=1e-5, atol=1e-6)


def test_more_rows_than_max_batch_size_is_refused(batch_program):
    async def scenario(scheduler, _):
        with pytest.raises(Invalid) as refused:
            await scheduler.submit([np.ones((9, 4), np.float32)])
        return refused.value

    refused = run(batch_program, batching(8), scenario)
    assert refused.problems[0].rule == "input.batch"


def test_a_full_queue_refuses_at_once_with_a_retry_hint(heavy_program):
    x = np.random.rand(HEAVY_SIZE).astype(np.float32)
    config = {"dynamic_batching": {"default_queue_policy": {"max_queue_size": 2}}}

    async def scenario(scheduler, metrics):
        running = [asyncio.create_task(scheduler.submit([x])) for _ in range(3)]
        await asyncio.sleep(0.02)  # one executes, two queue
        assert scheduler.depth == 2
        assert 'etrt_queue_depth{model="m",method="forward"} 2' in metrics.render({})
        with pytest.raises(Busy) as busy:
            await scheduler.submit([x])
        ahead = scheduler.refusal()  # what a protocol asks before reading a body
        outputs = await asyncio.gather(*running)
        return busy.value, ahead, scheduler.refusal(), outputs

    busy, ahead, after, outputs = run(heavy_program, config, scenario)
    assert busy.retry_after_s >= 1.0 and "max_queue_size 2" in busy.message
    # It names its queue, for the fronts' gates (service/dataplane/scheduling/gate.py).
    assert type(busy) is QueueFull
    assert (busy.model, busy.version, busy.method) == ("m", "1", "forward")
    assert busy.pace_s == 0.0  # nothing has finished yet: no pace for a gate to go by
    assert type(ahead) is QueueFull and ahead.message == busy.message
    assert after is None  # drained: room again
    assert len(outputs) == 3


def test_a_batching_queue_is_bounded_too(batch_program):
    x = np.ones((1, 4), np.float32)

    async def scenario(scheduler, _):
        queued = [asyncio.create_task(scheduler.submit([x])) for _ in range(2)]
        await asyncio.sleep(0)
        with pytest.raises(Busy):
            await scheduler.submit([x])
        return await asyncio.gather(*queued)

    assert len(run(batch_program, batching(8, delay_us=200_000, max_queue=2), scenario)) == 2


def test_the_deadline_passes_while_waiting_for_an_instance_and_it_is_never_executed(heavy_program):
    x = np.random.rand(HEAVY_SIZE).astype(np.float32)
    config = {
        "dynamic_batching": {"default_queue_policy": {"default_timeout_microseconds": 30_000}}
    }

    async def scenario(scheduler, _):
        results = await asyncio.gather(
            *[scheduler.submit([x]) for _ in range(3)], return_exceptions=True
        )
        return results, counted(scheduler)

    results, stats = run(heavy_program, config, scenario)
    assert sum(isinstance(r, DeadlineExceeded) for r in results) == 2
    assert stats["execution_count"] == 1


def test_a_request_timeout_overrides_the_default_and_expires_in_the_batch_queue(batch_program):
    x = np.ones((1, 4), np.float32)

    async def scenario(scheduler, _):
        loop = asyncio.get_running_loop()
        begun = loop.time()
        with pytest.raises(DeadlineExceeded):
            await scheduler.submit([x], timeout_s=0.05)
        waited = loop.time() - begun
        await asyncio.sleep(0.3)
        return waited, counted(scheduler), scheduler.pool._in_flight

    waited, stats, in_flight = run(
        batch_program, batching(8, delay_us=1_000_000, timeout_us=5_000_000), scenario
    )
    assert 0.04 < waited < 0.5
    assert stats["execution_count"] == 0 and in_flight == 0


def test_a_cancelled_request_leaves_the_queue_before_it_executes(batch_program):
    x = np.ones((1, 4), np.float32)

    async def scenario(scheduler, _):
        task = asyncio.create_task(scheduler.submit([x]))
        await asyncio.sleep(0.05)
        assert scheduler.depth == 1
        task.cancel()
        await asyncio.sleep(0.4)  # past the delay: it would have been executed by now
        return scheduler.depth, counted(scheduler), scheduler.pool._in_flight

    depth, stats, in_flight = run(batch_program, batching(8, delay_us=200_000), scenario)
    assert depth == 0 and stats["execution_count"] == 0 and in_flight == 0


def test_a_request_queued_before_close_is_still_served(batch_program):
    x = np.ones((1, 4), np.float32)

    async def scenario(scheduler, _):
        task = asyncio.create_task(scheduler.submit([x]))
        await asyncio.sleep(0.01)
        loop = asyncio.get_running_loop()
        begun = loop.time()
        await scheduler.pool.close()  # waits for the queued request's execute
        assert loop.time() - begun > 0.05  # the delay it waited in the queue
        return await asyncio.wait_for(task, 1.0)

    [output] = run(batch_program, batching(8, delay_us=100_000), scenario)
    np.testing.assert_allclose(output, eager(batch_program, x), rtol=1e-5, atol=1e-6)


def test_batch_sizes_and_queue_depth_show_in_metrics_until_the_model_is_deleted(batch_program):
    x = np.ones((2, 4), np.float32)

    async def scenario(scheduler, metrics):
        await asyncio.gather(*[scheduler.submit([x]) for _ in range(3)])
        shown = metrics.render({})
        metrics.forget_model("m")
        return shown, metrics.render({})

    shown, forgotten = run(batch_program, batching(8, delay_us=100_000), scenario)
    labels = 'model="m",method="forward"'
    assert f'etrt_batch_size_bucket{{{labels},le="4"}} 0' in shown
    assert f'etrt_batch_size_bucket{{{labels},le="8"}} 1' in shown  # 3 x 2 rows in one execute
    assert f"etrt_batch_size_sum{{{labels}}} 6" in shown
    assert f"etrt_queue_depth{{{labels}}} 0" in shown
    assert 'model="m"' not in forgotten


def test_a_replaced_models_queue_gauge_does_not_keep_its_scheduler_alive(batch_program):
    import gc
    import weakref

    async def scenario(scheduler, metrics):
        return weakref.ref(scheduler), metrics

    gone, metrics = run(batch_program, batching(8), scenario)
    gc.collect()
    assert gone() is None
    assert 'etrt_queue_depth{model="m",method="forward"} 0' in metrics.render({})


def test_without_dynamic_batching_each_request_is_an_execute_of_its_own_rows(batch_program):
    x = np.ones((3, 4), np.float32)

    async def scenario(scheduler, _):
        await asyncio.gather(*[scheduler.submit([x]) for _ in range(2)])
        return counted(scheduler)

    # A model that takes client-made batches counts their rows; one that does not, 1.
    assert run(batch_program, {"max_batch_size": 8}, scenario) == {
        "execution_count": 2,
        "inference_count": 6,
        "batch_stats": {3: {"count": 2}},
    }
    assert run(batch_program, {}, scenario) == {
        "execution_count": 2,
        "inference_count": 2,
        "batch_stats": {1: {"count": 2}},
    }


def prioritized(per_level=None, levels=2, default=2):
    return {
        "dynamic_batching": {
            "default_queue_policy": {"max_queue_size": 0, "default_timeout_microseconds": 0},
            "priority_levels": levels,
            "default_priority_level": default,
            "priority_queue_policy": {
                str(level): {
                    "max_queue_size": 0,
                    "default_timeout_microseconds": 0,
                    "timeout_action": "REJECT",
                    **policy,
                }
                for level, policy in (per_level or {}).items()
            },
        }
    }


@pytest.mark.parametrize(
    "per_level, arrivals, expected",
    [
        pytest.param(
            {},
            # (tag, priority, seconds before the next arrival): "first" executes, the rest queue
            [("first", 0, 0.02), ("low0", 2, 0), ("low1", 2, 0), ("low2", 2, 0.01)]
            + [("high", 1, 0), ("dflt", 0, 0)],
            # The default level (2 here) keeps arrival order with the other level-2 requests.
            ["first", "high", "low0", "low1", "low2", "dflt"],
            id="the-higher-level-first",
        ),
        pytest.param(
            {1: {"default_timeout_microseconds": 10_000, "timeout_action": "DELAY"}},
            # "first" executes for 60 ms or more (longer on a loaded machine, where the sleeps
            # stretch too): both others arrive while it runs, "later" past level 1's 10 ms.
            [("first", 2, 0.005), ("delayed", 1, 0.015), ("later", 2, 0)],
            ["first", "later", "delayed"],
            id="past-a-delay-timeout-behind-later-ones",
        ),
    ],
)
def test_a_saturated_instance_takes_requests_in_priority_order(
    heavy_program, per_level, arrivals, expected
):
    x = np.random.rand(HEAVY_SIZE).astype(np.float32)
    finished = []

    async def scenario(scheduler, _):
        async def call(tag, priority):
            await scheduler.submit([x], priority=priority)
            finished.append(tag)

        running = []
        for tag, priority, pause in arrivals:
            running.append(asyncio.create_task(call(tag, priority)))
            if pause:
                await asyncio.sleep(pause)
        await asyncio.gather(*running)
        return counted(scheduler)

    stats = run(heavy_program, prioritized(per_level), scenario)
    assert finished == expected
    # Without max_batch_size nothing is merged: one execute per request.
    assert stats["execution_count"] == len(arrivals)
    assert stats["batch_stats"] == {1: {"count": len(arrivals)}}


def test_a_full_level_refuses_only_its_own_requests(heavy_program):
    x = np.random.rand(HEAVY_SIZE).astype(np.float32)

    async def scenario(scheduler, _):
        running = [asyncio.create_task(scheduler.submit([x], priority=1))]
        await asyncio.sleep(0.02)
        running.append(asyncio.create_task(scheduler.submit([x], priority=2)))
        await asyncio.sleep(0)
        with pytest.raises(Busy) as busy:
            await scheduler.submit([x], priority=2)
        high = asyncio.create_task(scheduler.submit([x], priority=1))
        await asyncio.gather(*running, high)
        return busy.value

    busy = run(heavy_program, prioritized({2: {"max_queue_size": 1}}), scenario)
    assert "at priority level 2 (max_queue_size 1)" in busy.message
    # Not a QueueFull: a front cannot tell which level a request will take, so must not gate.
    assert type(busy) is Busy


def test_a_priority_past_the_levels_is_refused(batch_program):
    async def scenario(scheduler, _):
        refusals = []
        for priority in (3, -1, "high", True):
            with pytest.raises(Invalid) as refused:
                await scheduler.submit([np.ones((1, 4), np.float32)], priority=priority)
            refusals.append(refused.value.problems[0].rule)
        return refusals

    assert run(batch_program, prioritized(), scenario) == ["request.priority"] * 4


@pytest.mark.parametrize(
    "given, policy, merges",
    [
        ({}, DirectPolicy, False),
        ({"max_batch_size": 8}, DirectPolicy, False),  # client-made batches, none merged
        (
            {"dynamic_batching": {"default_queue_policy": {"max_queue_size": 4}}},
            DirectPolicy,
            False,
        ),
        (batching(8), BatchingPolicy, True),
        (prioritized(), PriorityPolicy, False),
        ({**prioritized(), "max_batch_size": 8}, PriorityPolicy, True),
    ],
)
def test_the_configuration_chooses_one_policy(batch_program, given, policy, merges):
    async def scenario(scheduler, _):
        return type(scheduler), getattr(scheduler, "merges", False)

    assert policy_for(configured(given)) is policy
    assert run(batch_program, given, scenario) == (policy, merges)


def test_neither_direct_execution_nor_a_queue_adds_a_task_of_its_own(heavy_program):
    x = np.random.rand(HEAVY_SIZE).astype(np.float32)

    async def scenario(scheduler, _):
        before = asyncio.all_tasks()
        requests = [asyncio.create_task(scheduler.submit([x])) for _ in range(2)]
        await asyncio.sleep(0.02)  # one executes in a worker thread, one waits for it
        during = asyncio.all_tasks() - before - set(requests)
        await asyncio.gather(*requests)
        return len(during)

    assert run(heavy_program, {}, scenario) == 0
    # The queue of priority levels (no merging, the same program) starts its batches from
    # callbacks (an arrival, an execute's end), so that the next batch starts before the
    # last one's requests are answered: no dispatcher, no task per batch.
    assert run(heavy_program, prioritized(), scenario) == 0


def test_priority_levels_with_merging_batch_the_higher_level_first(batch_program):
    finished = []

    async def scenario(scheduler, _):
        async def call(tag, priority):
            await scheduler.submit([np.ones((1, 4), np.float32)], priority=priority)
            finished.append(tag)

        tags = [(f"low{i}", 2) for i in range(4)] + [(f"high{i}", 1) for i in range(4)]
        await asyncio.gather(*[call(tag, priority) for tag, priority in tags])
        return counted(scheduler)

    config = {**prioritized(), "max_batch_size": 4}
    config["dynamic_batching"]["max_queue_delay_microseconds"] = 100_000
    stats = run(batch_program, config, scenario)
    # All eight queue before the first batch forms: the four high ones fill it.
    assert sorted(finished[:4]) == [f"high{i}" for i in range(4)], finished
    assert stats["batch_stats"] == {4: {"count": 2}}


def test_a_refusal_names_the_queues_measured_drain_time(heavy_program):
    x = np.random.rand(HEAVY_SIZE).astype(np.float32)
    bound = 10

    async def scenario(scheduler, _):
        loop = asyncio.get_running_loop()
        done = []

        async def call():
            await scheduler.submit([x])
            done.append(loop.time())

        running = [asyncio.create_task(call()) for _ in range(bound + 1)]  # 1 runs, 10 wait
        while len(done) < 3:  # completions with requests waiting: the pace is measured
            await asyncio.sleep(0.005)
        running += [asyncio.create_task(call()) for _ in range(bound - scheduler.depth)]
        await asyncio.sleep(0)
        with pytest.raises(Busy) as busy:
            await scheduler.submit([x])
        drain, depth = scheduler.drain_s(), scheduler.depth
        await asyncio.gather(*running)
        return busy.value, drain, depth, (done[-1] - done[0]) / (len(done) - 1)

    busy, drain, depth, interval = run(
        heavy_program,
        {"dynamic_batching": {"default_queue_policy": {"max_queue_size": bound}}},
        scenario,
    )
    assert depth == bound
    assert busy.retry_after_s == max(1.0, drain) and busy.drain_s == drain
    assert busy.pace_s == pytest.approx(drain / depth)
    # The pace the test saw, 1 instance: within a factor of 2 of the queue's own measure.
    assert 0.5 < drain / (depth * interval) < 2.0, (drain, depth, interval)
