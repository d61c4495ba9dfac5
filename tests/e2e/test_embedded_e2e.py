"""The embedded engine (service.embedded.Engine) on the server's own cases: deploy real exported
programs and compare with eager torch, refusals naming their rules with nothing stored, dynamic
batching, bounded queues and deadlines, priorities, a read-only model repository, statistics and
metrics. No server process: the engine runs in this one, its ingest checks in real children."""

import asyncio
import json

import numpy as np
import pytest
import torch

from service.dataplane.gpu_faults import GpuFaulted
from service.embedded import Engine, InferResult, ModelInfo, NotReady
from service.errors import Conflict, DeadlineExceeded, Invalid, NotFound, QueueFull, Unavailable
from support import programs
from support.model_dirs import layout, snapshot
from support.program_fixtures import (
    dynamic_batch_program,
    external_weights_program,
    linear_relu_program,
    two_methods_program,
)
from support.prometheus import parse, value
from support.server import registry_rows
from support.trt_program_fixtures import mixed_16


def run(body):
    """Runs `body(engine)` on an engine over a fresh store in `tmp_path`, closed after."""

    async def main(store):
        engine = await Engine.open(store)
        try:
            return await body(engine)
        finally:
            await engine.close()

    return main


def eager(program, *inputs, method=None):
    module = program.module if method is None else program.methods[method][0]
    with torch.no_grad():
        out = module(*[torch.from_numpy(x) for x in inputs])
    return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]


def test_deploy_infer_describe_list_and_delete(
    tmp_path, linear_relu_program, two_methods_program, external_weights_program
):
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    x3 = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    xw = np.random.default_rng(3).standard_normal((2, 6)).astype(np.float32)

    async def body(engine: Engine):
        info = await engine.deploy("linear", linear_relu_program.pte)
        assert isinstance(info, ModelInfo) and info.ready and info.version == "1"
        [spec] = info.methods["forward"].inputs
        assert (spec.name, spec.datatype, spec.shape) == ("input_0", "FP32", [2, 4])
        assert info.description["files"][0]["name"] == linear_relu_program.pte.name
        result = await engine.infer("linear", [x])
        assert isinstance(result, InferResult) and result.version == "1"
        np.testing.assert_allclose(result["output_0"], eager(linear_relu_program, x)[0], 1e-5)
        # By name, and from a torch tensor through DLPack (host memory: no copy).
        named = await engine.infer("linear", {"input_0": torch.from_numpy(x)})
        np.testing.assert_array_equal(named["output_0"], result["output_0"])

        await engine.deploy("two", two_methods_program.pte)
        triple = await engine.infer("two", [x3], method="triple")
        np.testing.assert_allclose(
            triple["output_0"], eager(two_methods_program, x3, method="triple")[0], 1e-5
        )
        with pytest.raises(NotFound, match="nope"):
            await engine.infer("two", [x3], method="nope")

        await engine.deploy("weights", external_weights_program.pte, external_weights_program.ptds)
        out = await engine.infer("weights", [xw])
        np.testing.assert_allclose(out["output_0"], eager(external_weights_program, xw)[0], 1e-5)

        assert [m.name for m in await engine.models()] == ["linear", "two", "weights"]
        assert registry_rows(tmp_path / "store") == ["linear", "two", "weights"]
        with pytest.raises(Conflict, match="replace"):
            await engine.deploy("linear", linear_relu_program.pte)
        second = await engine.deploy("linear", linear_relu_program.pte.read_bytes(), version=2)
        assert [v.version for v in second.versions] == ["1", "2"]
        await engine.delete("linear")
        with pytest.raises(NotFound):
            await engine.describe("linear")
        with pytest.raises(NotFound):
            await engine.infer("linear", [x])

    asyncio.run(run(body)(tmp_path / "store"))


def test_refusals_name_their_rules_and_store_nothing(
    tmp_path, dynamic_batch_program, linear_relu_program
):
    """The cases of test_batching_e2e's refused configurations, and bad inputs."""
    cases = [
        (
            dynamic_batch_program.pte,
            {"bad name.ptd": b"x"},
            {"max_batch_size": 4, "colour": 1},
            {"config.unknown_key", "data.characters", "data.invalid"},
        ),
        (linear_relu_program.pte, {}, {"max_batch_size": 2, "dynamic_batching": {}}, None),
        (dynamic_batch_program.pte, {}, {"max_batch_size": 64, "dynamic_batching": {}}, None),
    ]
    expected = [cases[0][3], {"config.not_batchable"}, {"config.max_batch_size"}]

    async def body(engine: Engine):
        for (pte, data, config, _), rules in zip(cases, expected):
            with pytest.raises(Invalid) as refused:
                await engine.deploy("m", pte, data, config=config)
            assert {p.rule for p in refused.value.problems} == rules
        with pytest.raises(Invalid) as garbage:
            await engine.deploy("junk", b"not a program")
        assert garbage.value.problems
        assert await engine.models() == []
        await engine.deploy("dynamic", dynamic_batch_program.pte)
        with pytest.raises(Invalid) as too_big:
            await engine.infer("dynamic", [np.zeros((17, 4), np.float32)])
        [problem] = too_big.value.problems
        assert problem.input == "input_0" and problem.rule == "input.shape"
        with pytest.raises(Invalid, match="FP32"):
            await engine.infer("dynamic", [np.zeros((2, 4), np.int32)])

    asyncio.run(run(body)(tmp_path / "store"))
    assert registry_rows(tmp_path / "store") == ["dynamic"]


def test_concurrent_requests_are_batched_and_each_gets_its_own_answer(
    tmp_path, dynamic_batch_program
):
    config = {
        "max_batch_size": 16,
        "dynamic_batching": {"max_queue_delay_microseconds": 20000},
        "instance_group": [{"count": 1}],
    }
    rng = np.random.default_rng(7)
    inputs = [
        rng.standard_normal((int(rng.integers(1, 4)), 4)).astype(np.float32) for _ in range(48)
    ]

    async def body(engine: Engine):
        await engine.deploy("b", dynamic_batch_program.pte, config=config)
        results = await asyncio.gather(*[engine.infer("b", [x]) for x in inputs])
        for x, result in zip(inputs, results):
            np.testing.assert_allclose(result["output_0"], eager(dynamic_batch_program, x)[0], 1e-5)
        [stats] = await engine.statistics("b")
        assert stats.inference_count == sum(len(x) for x in inputs)  # rows, as Triton counts
        assert stats.execution_count < 48  # merged into batches
        metrics = parse(await engine.metrics_text())
        count = value(metrics, "etrt_batch_size_count", model="b", method="forward")
        assert count == stats.execution_count

    asyncio.run(run(body)(tmp_path / "store"))


def test_bounded_queues_deadlines_and_priorities(tmp_path, programs_dir):
    wide = programs.export_weight_bound(programs_dir, width=2048)
    bounded = {
        "dynamic_batching": {"default_queue_policy": {"max_queue_size": 2}},
        "instance_group": [{"count": 1}],
    }
    waiting = {
        "dynamic_batching": {"default_queue_policy": {"default_timeout_microseconds": 30_000}},
        "instance_group": [{"count": 1}],
    }
    levels = {"dynamic_batching": {"priority_levels": 2, "default_priority_level": 2}}
    x = np.ones((1, 2048), np.float32)

    async def outcomes(engine, model, count, **options):
        calls = [engine.infer(model, [x], **options) for _ in range(count)]
        return await asyncio.gather(*calls, return_exceptions=True)

    async def body(engine: Engine):
        await engine.deploy("bounded", wide.pte, config=bounded)
        await engine.deploy("waiting", wide.pte, config=waiting)
        await engine.deploy("levels", wide.pte, config=levels)
        results = await outcomes(engine, "bounded", 24)
        full = [r for r in results if isinstance(r, QueueFull)]
        assert len(full) >= 12 and all("max_queue_size 2" in e.message for e in full)
        assert all(isinstance(r, InferResult | QueueFull) for r in results), results
        results = await outcomes(engine, "waiting", 12)
        late = [r for r in results if isinstance(r, DeadlineExceeded)]
        assert late and all("not executed" in e.message for e in late)
        [stats] = await engine.statistics("waiting")
        assert stats.execution_count == 12 - len(late)
        # A caller's own deadline, and the priority parameter reaching the scheduler.
        results = await outcomes(engine, "levels", 8, timeout_s=0.001)
        assert any(isinstance(r, DeadlineExceeded) for r in results), results
        assert (await engine.infer("levels", [x], priority=1)).outputs
        with pytest.raises(Invalid, match="priority"):
            await engine.infer("levels", [x], priority=7)

    asyncio.run(run(body)(tmp_path / "store"))


def test_a_read_only_repository_serves_and_lists_refused_entries(
    tmp_path, linear_relu_program, external_weights_program
):
    models = layout(tmp_path / "models", linear_relu_program, external_weights_program)
    before = snapshot(models)
    x = np.random.default_rng(4).standard_normal((2, 4)).astype(np.float32)

    async def main():
        async with await Engine.open(repository=models) as engine:
            assert engine.ready
            engine.check_health()
            listed = {m.name: m for m in await engine.models()}
            assert sorted(listed) == ["good", "missing-data", "weights"]
            assert listed["good"].ready and listed["good"].config == {
                "instance_group": [{"count": 1}]
            }
            assert listed["missing-data"].state == "unavailable"
            assert [p["rule"] for p in listed["missing-data"].description["problems"]] == [
                "external.missing_key"
            ]
            result = await engine.infer("good", [x])
            np.testing.assert_allclose(result["output_0"], eager(linear_relu_program, x)[0], 1e-5)
            with pytest.raises(Unavailable):
                await engine.infer("missing-data", [x])
            assert engine.instance_count("good") == 1
            scratch = engine.settings.artifacts
            assert scratch.exists() and models not in scratch.parents
        assert not scratch.exists()  # the private copy goes with the engine
        assert not engine.ready
        with pytest.raises(NotReady):  # what a Ray Serve replica's health check raises
            engine.check_health()

    asyncio.run(main())
    assert snapshot(models) == before


@pytest.fixture(scope="module")
def sticky(mixed_16, tmp_path_factory):
    """mixed_16 whose every execute poisons the device context (as test_gpu_fault_e2e's)."""
    from support.trt_programs import with_plans_rewritten

    target = tmp_path_factory.mktemp("sticky") / "sticky.pte"
    return with_plans_rewritten(mixed_16.pte, target, test_sticky_fault="illegal_address")


def test_a_poisoned_gpu_context_ends_readiness_and_fails_the_health_check(
    tmp_path, mixed_16, sticky
):
    """The test engine provider leaves the host-memory stand-in in the state a CUDA illegal
    address leaves a context: the engine refuses from then on, and check_health (a Ray Serve
    replica's health check) raises, so Serve replaces the replica with a clean process."""
    backend = ("support.test_backend_setup:install_test_backend",)

    async def main():
        async with await Engine.open(tmp_path / "store", backend_setup=backend) as engine:
            await engine.deploy("good", mixed_16.pte)
            await engine.deploy("bad", sticky)
            inputs = mixed_16.example_inputs()
            result = await engine.infer("good", inputs)
            [output] = result.outputs.values()
            np.testing.assert_allclose(
                output.reshape(-1), mixed_16.reference(*inputs)[0].reshape(-1), 1e-5, 1e-5
            )
            engine.check_health()
            with pytest.raises(GpuFaulted, match="poisoned"):
                await engine.infer("bad", inputs)
            assert not engine.ready
            with pytest.raises(NotReady, match="model 'bad' .* poisoned the GPU context"):
                engine.check_health()
            with pytest.raises(GpuFaulted):
                await engine.infer("good", inputs)

    asyncio.run(main())


def test_config_is_a_json_object_as_the_upload_form_takes_it(tmp_path, dynamic_batch_program):
    """The config travels as the dict the form's JSON field decodes to: the stored description
    shows it as the server does."""
    config = {"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 2000}}

    async def body(engine: Engine):
        info = await engine.deploy("b", dynamic_batch_program.pte, config=config)
        assert info.config["max_batch_size"] == 8
        assert json.loads(json.dumps(info.description))["config"] == info.config

    asyncio.run(run(body)(tmp_path / "store"))
