"""The spin provider (tests/support/spin_engine_provider.py), the stand-in for a TensorRT engine
of known cost that bench/bench_gpu_busy.py measures the server with: on the H200, a program run
by the native host gets the add's right answer from the kernel, each launch lasts at least its
configured time on the GPU's clock (longer with more rows), and two instances' launches never
overlap.

Programs as in test_staging_cuda.py ($ETHOST_TRT_PROGRAMS, else exported here).
"""

import os
import tempfile

import ethost
import numpy as np
import pytest

from support.spin_engine_provider import RING, SpinEngineProvider, spin_records
from support.trt_host import load_tensorrt_backend
from support.trt_models import TrtProgram

pytestmark = pytest.mark.gpu
trt = load_tensorrt_backend()
BASE_US, ROW_US = 200.0, 10.0


@pytest.fixture
def spin_program(programs_dir):
    where = os.environ.get("ETHOST_TRT_PROGRAMS")
    if where:
        found = TrtProgram.at(where, "spin_add", 256, dynamic=True)
        assert found.exists(), f"ETHOST_TRT_PROGRAMS lacks {found.pte}"
        return found
    from support.trt_programs import export_trt_program

    return export_trt_program(programs_dir, "spin_add", 256, dynamic=True)


@pytest.fixture
def spin_provider(monkeypatch):
    # On tmpfs: Linux pins a file's pages for a device only when shmem backs them.
    records = tempfile.mktemp(prefix="etrt-spin-records-", dir="/dev/shm")
    monkeypatch.setenv("ETRT_TEST_SPIN_STATS", records)
    trt.testing.use_cuda_memory()
    provider = SpinEngineProvider(BASE_US, ROW_US)
    trt.set_engine_provider(provider)
    yield provider, spin_records(records)
    trt.set_engine_provider(None)
    provider.close()
    os.unlink(records)


def test_spin_kernels_compute_and_last_their_time(spin_program, spin_provider):
    provider, records = spin_provider
    method = ethost.Program(str(spin_program.pte), []).load_method("forward")
    rng = np.random.default_rng(0)
    for rows in (1, 1, 32, 7, 32):
        x, y = (rng.standard_normal((rows, 64)).astype(np.float32) for _ in range(2))
        (out,) = method.execute([x, y])
        np.testing.assert_allclose(np.asarray(out), x + y, rtol=1e-6)
    launches = int(records[0])
    assert launches == 5 and provider.calls["execute"] == 5
    got = records[1:].reshape(RING, 3)[:launches].astype(np.int64)
    assert list(got[:, 2]) == [1, 1, 32, 7, 32]
    took_us = (got[:, 1] - got[:, 0]) / 1e3
    wanted = BASE_US + ROW_US * got[:, 2]
    # At least the configured time (the SM clock runs at most at the device's rate), and not
    # wildly more (the clock under load stays within a factor of 2 of its highest).
    assert np.all(took_us >= 0.95 * wanted) and np.all(took_us <= 2.5 * wanted), took_us


def test_spin_kernels_of_two_instances_take_turns(spin_program, spin_provider):
    """Two methods (two delegate instances, two streams) executing at once from two threads:
    their launches run one after the other on the GPU, as a GPU-filling engine's would."""
    import threading

    _, records = spin_provider
    methods = [ethost.Program(str(spin_program.pte), []).load_method("forward") for _ in "ab"]
    x = np.ones((32, 64), np.float32)

    def run(method):
        for _ in range(5):
            method.execute([x, x])

    threads = [threading.Thread(target=run, args=(m,)) for m in methods]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    launches = int(records[0])
    assert launches == 10
    got = records[1:].reshape(RING, 3)[:launches].astype(np.int64)
    got = got[np.argsort(got[:, 0])]
    # Back to back, not overlapped: a launch starts once the one before it ended. The end is
    # stamped by a block of the earlier kernel just before it retires, so the next one may stamp
    # its start a fraction of a microsecond sooner (seen: 160 ns); overlapping kernels would
    # overlap by most of their 200+ us.
    assert np.all(got[1:, 0] >= got[:-1, 1] - 2_000), got


def test_launches_replayed_from_a_cuda_graph_are_recorded_too(spin_program, spin_provider):
    """With use_cuda_graphs the delegate captures the spin kernel once and replays it without
    calling the provider; the kernel numbers its own records, so every replay is counted (what
    bench_gpu_busy.py --cuda-graphs measures)."""
    provider, records = spin_provider
    trt.set_load_options(use_cuda_graphs=True)
    try:
        method = ethost.Program(str(spin_program.pte), []).load_method("forward")
        x = np.ones((1, 64), np.float32)
        for _ in range(6):
            (out,) = method.execute([x, x])
            np.testing.assert_array_equal(np.asarray(out), x + x)
    finally:
        trt.set_load_options()
    assert provider.calls["execute"] == 2  # the warm-up and the captured one; 4 replays
    launches = int(records[0])
    assert launches == 6
    got = records[1:].reshape(RING, 3)[:launches].astype(np.int64)
    assert list(got[:, 2]) == [1] * 6
    assert np.all(got[1:, 0] >= got[:-1, 1] - 2_000), got  # six launches, one after another
    assert np.all((got[:, 1] - got[:, 0]) / 1e3 >= 0.95 * (BASE_US + ROW_US)), got
