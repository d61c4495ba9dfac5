"""ethost runs real exported programs: results match eager torch, metadata, instances, memory."""

import threading
import time

import ethost
import numpy as np
import pytest
import torch

from support.program_fixtures import (  # noqa: F401  (fixtures)
    cpu_heavy_program,
    dynamic_batch_program,
    external_weights_program,
    linear_relu_aligned_program,
    linear_relu_program,
    mix_of_ops_program,
    split_weights_program,
    two_methods_program,
)

# slow (left out of the quick lane, docs/development.md): exports programs, picked by fixture
# name in parametrized tests
pytestmark = pytest.mark.slow


def eager(module, inputs):
    with torch.no_grad():
        out = module(*inputs)
    return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]


def run(exported, method="forward", inputs=None, module=None):
    program = ethost.Program(exported.pte, exported.ptds)
    inputs = inputs if inputs is not None else exported.example_inputs
    got = program.load_method(method).execute([t.numpy() for t in inputs])
    want = eager(module or exported.module, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    return program


@pytest.mark.parametrize(
    "fixture",
    [
        "linear_relu_program",
        "linear_relu_aligned_program",
        "mix_of_ops_program",
        "external_weights_program",
        "split_weights_program",
    ],
)
def test_program_matches_eager(fixture, request):
    run(request.getfixturevalue(fixture))


def test_weights_really_live_in_the_data_files(external_weights_program, split_weights_program):
    assert len(external_weights_program.ptds) == 1
    assert len(split_weights_program.ptds) == 2
    keys = [set(ethost.data_file_keys(p)) for p in split_weights_program.ptds]
    assert {"first.weight", "first.bias"} in keys and {"second.weight", "second.bias"} in keys
    assert set(ethost.data_file_keys(external_weights_program.ptds[0])) == keys[0] | keys[1]


@pytest.mark.parametrize("batch", [1, 3, 16])
def test_dynamic_batch_within_bounds(dynamic_batch_program, batch):
    inputs = (torch.randn(batch, 4),)
    run(dynamic_batch_program, inputs=inputs)


def test_dynamic_batch_meta(dynamic_batch_program):
    meta = ethost.Program(dynamic_batch_program.pte).method_meta("forward")
    (spec,) = meta["inputs"]
    assert spec["dynamic"] is True
    assert spec["shape"] == [16, 4]


def test_two_methods(two_methods_program):
    program = run(two_methods_program)
    assert sorted(program.method_names) == ["forward", "triple"]
    module, inputs = two_methods_program.methods["triple"]
    run(two_methods_program, method="triple", inputs=inputs, module=module)


def test_method_meta(mix_of_ops_program):
    program = ethost.Program(str(mix_of_ops_program.pte))
    assert program.path == str(mix_of_ops_program.pte)
    assert program.data_paths == []
    meta = program.method_meta("forward")
    assert meta["name"] == "forward"
    x, idx = meta["inputs"]
    assert (x["tag"], x["dtype"], x["shape"], x["dynamic"]) == ("Tensor", "float32", [3, 8], False)
    assert (idx["dtype"], idx["shape"], idx["nbytes"]) == ("int64", [3], 24)
    assert x["memory_planned"] is True
    assert [o["shape"] for o in meta["outputs"]] == [[6, 8], [3, 1]]
    assert meta["delegates"] == []
    assert meta["planned_buffers"] and all(b["device"] == "cpu" for b in meta["planned_buffers"])
    assert program.load_method("forward").meta == meta


def test_load_method_loads_once_and_instances_are_independent(linear_relu_program):
    program = ethost.Program(linear_relu_program.pte)
    assert program.load_method("forward") is program.load_method("forward")
    instances = program.instances("forward", 3)
    assert len(instances) == 3
    arenas = [tuple(m.arena_addresses()) for m in instances]
    assert len(set(arenas)) == 3
    x = np.random.default_rng(0).standard_normal((2, 4), dtype=np.float32)
    want = eager(linear_relu_program.module, (torch.from_numpy(x),))[0]
    for m in instances:
        np.testing.assert_allclose(m.execute([x])[0], want, rtol=1e-5, atol=1e-6)


def test_instances_outlive_their_program_object(linear_relu_program):
    instances = ethost.Program(linear_relu_program.pte).instances("forward", 2)
    x = np.ones((2, 4), np.float32)
    assert instances[1].execute([x])[0].shape == (2, 3)


@pytest.mark.parametrize(
    "fixture", ["linear_relu_program", "linear_relu_aligned_program", "mix_of_ops_program"]
)
def test_arena_addresses_are_256_aligned(fixture, request):
    program = ethost.Program(request.getfixturevalue(fixture).pte)
    for method in program.instances("forward", 4):
        addresses = method.arena_addresses()
        assert addresses
        assert all(a % 256 == 0 for a in addresses)


def test_outputs_are_copies_not_views_of_planned_memory(linear_relu_program):
    method = ethost.Program(linear_relu_program.pte).load_method("forward")
    first = method.execute([np.ones((2, 4), np.float32)])[0]
    kept = first.copy()
    method.execute([np.full((2, 4), 5.0, np.float32)])
    np.testing.assert_array_equal(first, kept)
    assert first.flags.owndata or first.base is not None
    assert first.flags.writeable


def test_accepts_buffer_protocol_dlpack_and_strided_inputs(linear_relu_program):
    method = ethost.Program(linear_relu_program.pte).load_method("forward")
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    want = method.execute([x])[0]
    as_torch = torch.from_numpy(x.copy())
    np.testing.assert_array_equal(method.execute([as_torch])[0], want)  # DLPack
    np.testing.assert_array_equal(method.execute([memoryview(x)])[0], want)  # buffer protocol
    strided = np.asfortranarray(x)
    assert not strided.flags.c_contiguous
    np.testing.assert_array_equal(method.execute([strided])[0], want)
    readonly = x.copy()
    readonly.flags.writeable = False
    np.testing.assert_array_equal(method.execute([readonly])[0], want)


def test_gil_is_released_during_execute(cpu_heavy_program):
    method = ethost.Program(cpu_heavy_program.pte).load_method("forward")
    x = cpu_heavy_program.example_inputs[0].numpy()
    started = time.perf_counter()
    method.execute([x])
    single = time.perf_counter() - started
    assert single > 0.05, "the heavy program must run long enough to observe the GIL"

    beats = []
    stop = threading.Event()

    def heartbeat():
        while not stop.is_set():
            beats.append(time.perf_counter())
            time.sleep(0.002)

    thread = threading.Thread(target=heartbeat)
    thread.start()
    time.sleep(0.01)
    begin = time.perf_counter()
    method.execute([x])
    end = time.perf_counter()
    stop.set()
    thread.join()
    during = [b for b in beats if begin < b < end]
    # With the GIL held there would be no beat at all during execute.
    assert len(during) >= 5, (len(during), end - begin)


def test_last_run_ns_measures_the_execute_without_the_gil_wait(cpu_heavy_program):
    method = ethost.Program(cpu_heavy_program.pte).load_method("forward")
    assert method.last_run_ns == 0
    x = cpu_heavy_program.example_inputs[0].numpy()
    stop = threading.Event()

    def hold_the_gil():  # pure-Python spinning: takes the GIL whenever execute releases it
        while not stop.is_set():
            pass

    thread = threading.Thread(target=hold_the_gil)
    thread.start()
    try:
        started = time.perf_counter()
        method.execute([x])
        wall = time.perf_counter() - started
    finally:
        stop.set()
        thread.join()
    ran = method.last_run_ns * 1e-9
    assert 0 < ran <= wall, (ran, wall)


def test_concurrent_call_on_same_instance_is_refused(cpu_heavy_program):
    method = ethost.Program(cpu_heavy_program.pte).load_method("forward")
    x = cpu_heavy_program.example_inputs[0].numpy()
    errors = []
    running = threading.Event()

    def long_call():
        running.set()
        method.execute([x])

    thread = threading.Thread(target=long_call)
    thread.start()
    running.wait()
    time.sleep(0.05)
    try:
        method.execute([x])
    except ethost.InstanceBusy as e:
        errors.append(e)
    thread.join()
    assert len(errors) == 1
    assert "forward" in str(errors[0])
    assert isinstance(errors[0], RuntimeError)
    method.execute([x])  # free again once the other call returned


def test_two_instances_run_in_parallel_threads(cpu_heavy_program):
    program = ethost.Program(cpu_heavy_program.pte)
    a, b = program.instances("forward", 2)
    x = cpu_heavy_program.example_inputs[0].numpy()
    results = {}

    def call(name, method):
        results[name] = method.execute([x])[0]

    threads = [threading.Thread(target=call, args=(n, m)) for n, m in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(results["a"], results["b"])
    want = eager(cpu_heavy_program.module, cpu_heavy_program.example_inputs)[0]
    np.testing.assert_allclose(results["a"], want, rtol=1e-4, atol=1e-5)


def test_kernels_run_inline_when_the_shared_thread_pool_is_off(cpu_heavy_program):
    # The server turns the pool off so parallel instances scale (bench/bench_host.py measures
    # it); the results must not depend on where the kernels ran.
    method = ethost.Program(cpu_heavy_program.pte).load_method("forward")
    assert method.kernel_threadpool is True
    x = cpu_heavy_program.example_inputs[0].numpy()
    pooled = method.execute([x])[0]
    method.kernel_threadpool = False
    assert method.kernel_threadpool is False
    np.testing.assert_array_equal(method.execute([x])[0], pooled)


def test_inputs_numpy_cannot_pass_by_buffer_still_get_named_errors(linear_relu_program):
    # Big-endian and byte buffers miss the buffer-protocol fast path; they must still be judged
    # against the signature and refused with the input named, never misread.
    method = ethost.Program(linear_relu_program.pte).load_method("forward")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with pytest.raises(ethost.InputError, match="input 0.*float32"):
        method.execute([x.astype(">f4")])
    with pytest.raises(ethost.InputError, match="input 0.*float32.*uint8"):
        method.execute([bytearray(32)])
    with pytest.raises(ethost.InputError, match="input 0.*float32.*float64"):
        method.execute([x.astype(np.float64)])


def test_large_and_small_outputs_are_both_owned_arrays(cpu_heavy_program, linear_relu_program):
    # Outputs up to 64 KiB are copied into numpy.empty arrays, larger ones are wrapped: both
    # must be ordinary, writable arrays of the right dtype and shape.
    small = ethost.Program(linear_relu_program.pte).load_method("forward")
    large = ethost.Program(cpu_heavy_program.pte).load_method("forward")
    x = cpu_heavy_program.example_inputs[0].numpy()
    assert x.nbytes > 64 * 1024
    for method, inputs in ((small, [np.ones((2, 4), np.float32)]), (large, [x])):
        out = method.execute(inputs)[0]
        assert out.dtype == np.float32 and out.flags.writeable and out.flags.c_contiguous
        kept = out.copy()
        out[...] = np.nan  # writing to it must not disturb the next call
        np.testing.assert_array_equal(method.execute(inputs)[0], kept)


def test_backend_registry(tmp_path):
    before = ethost.registered_backends()
    assert isinstance(before, list)
    import ctypes.util

    libm = ctypes.util.find_library("m")
    assert ethost.load_backend_library(libm) == []  # a library registering no backend
    assert ethost.registered_backends() == before
    with pytest.raises(OSError, match="cannot load backend library"):
        ethost.load_backend_library(str(tmp_path / "missing.so"))


def test_no_torch_import_at_run_time(linear_relu_program):
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, ethost\n"
        f"m = ethost.Program({str(linear_relu_program.pte)!r}).load_method('forward')\n"
        "m.execute([np.ones((2, 4), np.float32)])\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
