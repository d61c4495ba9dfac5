"""Sticky GPU faults (issue 31, item 1) in parts: the device's answer through the native seam
(ethost.device_fault over the host-memory stand-in), the classification and the quarantine
(service/dataplane/gpu_faults.py), and the events file they and the supervisor share
(service/shared/engine_events.py). The whole path through real processes is
tests/e2e/test_gpu_fault_e2e.py."""

from __future__ import annotations

import time

import ethost
import pytest

from service.dataplane.gpu_faults import GpuFaulted, GpuFaults
from service.errors import Busy
from service.shared.engine_events import EngineEvents, GpuFault, Lifted, Restart
from support.trt_host import load_tensorrt_backend

ILLEGAL = "cudaErrorIllegalAddress: an illegal memory access was encountered"


def _fault(model: str, at: float, reason: str = ILLEGAL) -> GpuFault:
    return GpuFault(at, model, "1", "forward", "[input_0 [3, 5]]", reason)


def _faults(tmp_path, events=(), device=None, count=3, window=600.0):
    tmp_path.mkdir(exist_ok=True)
    file = EngineEvents(tmp_path / "events.jsonl")
    for event in events:
        file.append(event)
    return file, GpuFaults(file, lambda: device, count, window)


def test_the_host_stand_in_poisoned_is_what_the_device_reports():
    trt = load_tensorrt_backend()
    trt.testing.use_host_memory()
    try:
        assert ethost.device_fault() is None
        buffer = trt.testing.device_alloc(256)
        trt.testing.poison_device(ILLEGAL)
        assert ethost.device_fault() == ILLEGAL
        # Every later call fails as well, as in a poisoned CUDA context.
        with pytest.raises(RuntimeError, match="illegal memory access"):
            trt.testing.stream_synchronize(0)
        with pytest.raises(RuntimeError, match="illegal memory access"):
            trt.testing.device_read(buffer, 4)
    finally:
        trt.testing.use_host_memory()  # a fresh stand-in: the next tests' context works
    assert ethost.device_fault() is None


def test_a_failure_after_which_the_device_works_is_not_a_gpu_fault(tmp_path):
    _, faults = _faults(tmp_path, device=None)
    assert faults.classify("m", "1", "forward", "[]", RuntimeError("boom")) is None
    assert faults.fault is None and faults.refusal() is None


def test_a_sticky_fault_is_recorded_once_and_refuses_everything_after(tmp_path):
    file, faults = _faults(tmp_path, device=ILLEGAL)
    seen = []
    faults.on_fault(seen.append)
    error = faults.classify("bad", "1", "forward", "[input_0 [3, 5]]", RuntimeError("x"))
    assert isinstance(error, GpuFaulted) and isinstance(error, Busy)  # 503 + Retry-After
    assert "model 'bad'" in error.message and "input_0 [3, 5]" in error.message
    assert ILLEGAL in error.message and error.retry_after_s >= 1
    again = faults.classify("good", "1", "forward", "[]", RuntimeError("y"))
    assert "model 'bad'" in again.message  # the fault that poisoned it, not the later victim
    assert len(seen) == 1 and seen[0].model == "bad"
    assert [type(e) for e in file.read()] == [GpuFault]
    assert [line for line in faults.faults.render() if line.startswith("etrt_")] == [
        'etrt_model_gpu_faults_total{model="bad"} 1'
    ]


def test_k_faults_in_the_window_quarantine_and_a_lift_ends_it(tmp_path):
    now = time.time()
    old = [_fault("bad", now - 700)]  # outside the 600 s window
    recent = [_fault("bad", now - 30), _fault("bad", now - 20)]
    _, faults = _faults(tmp_path, old + recent, count=3)
    assert faults.quarantined("bad") is None  # two within the window
    file, faults = _faults(tmp_path / "b", [*recent, _fault("bad", now - 10)], count=3)
    reason = faults.quarantined("bad")
    assert (
        reason.startswith("quarantined: it poisoned the GPU context 3 times") and ILLEGAL in reason
    )
    assert "/v2/repository/models/bad/load" in reason
    assert faults.quarantined("good") is None
    faults.lift("bad")
    assert faults.quarantined("bad") is None
    # The next engine counts only the faults after the lift.
    assert GpuFaults(file, lambda: None, 3, 600.0).quarantined("bad") is None
    assert isinstance(file.read()[-1], Lifted)


def test_counts_survive_in_the_file(tmp_path):
    now = time.time()
    events = [
        _fault("bad", now - 5),
        Restart(now - 4, "gpu_fault", "1 in the last 60 s", 0.0),
        Restart(now - 3, "killed", "exit status -9", 0.0),
    ]
    _, faults = _faults(tmp_path, events)
    text = "\n".join(line for family in faults.families() for line in family.render())
    assert 'etrt_model_gpu_faults_total{model="bad"} 1' in text
    assert 'etrt_engine_restarts_total{reason="gpu_fault"} 1' in text
    assert 'etrt_engine_restarts_total{reason="killed"} 1' in text


def test_why_away_names_the_fault_behind_a_restart(tmp_path):
    file = EngineEvents(tmp_path / "events.jsonl")
    assert file.why_away(60) is None
    now = time.time()
    file.append(_fault("bad", now - 2))
    assert file.why_away(60).startswith("the engine is restarting: model 'bad'")
    file.append(Restart(now - 1, "gpu_fault", "2 in the last 60 s", 0.5))
    why = file.why_away(60)
    assert "gpu_fault, 2 in the last 60 s, after a backoff of 0.5 s" in why
    assert "model 'bad'" in why and ILLEGAL in why
    assert file.why_away(0.5) is None  # too old to be why


def test_a_cut_line_is_skipped_and_long_fields_are_clipped(tmp_path):
    file = EngineEvents(tmp_path / "events.jsonl")
    file.append(_fault("bad", time.time(), "x" * 10_000))
    with open(file.path, "a") as out:
        out.write('{"kind": "fault", "at": 1')  # a crash mid-write
    [event] = file.read()
    assert len(event.reason) == 400
    assert EngineEvents(None).read() == [] and EngineEvents(None).why_away(60) is None
