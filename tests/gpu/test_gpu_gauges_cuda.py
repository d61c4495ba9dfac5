"""Triton's GPU gauges from the real NVML on the H200: names, gpu_uuid labels as nvidia-smi
writes them, and values that move under load (utilization up while kernels run, memory used up
by an allocation, energy growing). Run through the device tool (tests/gpu/device_run.sh)."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from service.gpu_gauges import SAMPLE_INTERVAL_S, GpuGauges

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy")


def values(gauges: GpuGauges) -> dict[str, dict[str, float]]:
    return {f.name: {k[0]: v for k, v in f.samples.items()} for f in gauges.families()}


def test_gauges_move_under_load():
    uuids = subprocess.run(
        ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    gauges = GpuGauges.from_nvml()
    assert gauges.active
    gauges.start()
    try:
        idle = values(gauges)
        assert set(idle) == {
            "nv_gpu_utilization",
            "nv_gpu_memory_total_bytes",
            "nv_gpu_memory_used_bytes",
            "nv_gpu_power_usage",
            "nv_gpu_power_limit",
            "nv_energy_consumption",
        }, idle
        assert set(idle["nv_gpu_memory_total_bytes"]) == set(uuids)
        uuid = uuids[0]
        assert idle["nv_gpu_memory_total_bytes"][uuid] > 100e9
        assert 0 < idle["nv_gpu_power_usage"][uuid] <= idle["nv_gpu_power_limit"][uuid]

        held = cupy.zeros(4 << 30, dtype=cupy.uint8)  # 4 GiB
        stop = threading.Event()

        def busy():
            a = cupy.random.random((4096, 4096), dtype=cupy.float32)
            while not stop.is_set():
                for _ in range(20):
                    a = a @ a
                    a /= cupy.linalg.norm(a)
                cupy.cuda.Device().synchronize()

        worker = threading.Thread(target=busy)
        worker.start()
        peak = 0.0
        try:
            for _ in range(int(4 / SAMPLE_INTERVAL_S)):
                time.sleep(SAMPLE_INTERVAL_S)
                peak = max(peak, values(gauges)["nv_gpu_utilization"][uuid])
        finally:
            stop.set()
            worker.join()
        loaded = values(gauges)
        assert peak > 0.5, peak
        assert loaded["nv_gpu_memory_used_bytes"][uuid] >= idle["nv_gpu_memory_used_bytes"][
            uuid
        ] + (3 << 30)
        assert loaded["nv_energy_consumption"][uuid] > idle["nv_energy_consumption"][uuid]
        print(
            f"GPU gauges: utilization idle {idle['nv_gpu_utilization'][uuid]:.2f}, peak {peak:.2f};"
            f" memory used {idle['nv_gpu_memory_used_bytes'][uuid] / 2**30:.2f} ->"
            f" {loaded['nv_gpu_memory_used_bytes'][uuid] / 2**30:.2f} GiB; power"
            f" {loaded['nv_gpu_power_usage'][uuid]:.0f} W of"
            f" {loaded['nv_gpu_power_limit'][uuid]:.0f} W; energy"
            f" {loaded['nv_energy_consumption'][uuid]:.0f} J"
        )
        del held
    finally:
        gauges.stop()
