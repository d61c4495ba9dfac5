"""Triton's GPU gauges (service/gpu_gauges.py): absent on a host without NVML or a GPU (this
machine and CI), and written as model-analyzer's remote monitor parses them. On the H200 the
same families are read from the real NVML: tests/gpu/test_gpu_gauges_cuda.py."""

from prometheus_client.parser import text_string_to_metric_families

from service.dataplane.metrics import Metrics
from service.gpu_gauges import DeviceSample, GpuGauges, _visible

UUID = "GPU-12345678-9abc-def0-1234-56789abcdef0"


def test_absent_not_zero_without_a_gpu():
    gauges = GpuGauges.from_nvml()
    gauges.start()
    try:
        assert gauges.families() == []
        assert "nv_gpu" not in Metrics(sources=[gauges]).render({})
    finally:
        gauges.stop()


def test_families_parse_as_model_analyzer_reads_them():
    """Each family keyed by gpu_uuid; utilization 0-1; a quantity a device does not report
    (here: a second device without power readings, as on a Jetson) is left out, not zero."""
    readings = [
        DeviceSample(
            UUID,
            {
                "nv_gpu_utilization": 0.5,
                "nv_gpu_memory_total_bytes": 8e9,
                "nv_gpu_memory_used_bytes": 1e9,
                "nv_gpu_power_usage": 120.5,
                "nv_gpu_power_limit": 700.0,
                "nv_energy_consumption": 42.0,
            },
        ),
        DeviceSample("GPU-2", {"nv_gpu_memory_total_bytes": 4e9, "nv_gpu_memory_used_bytes": 0}),
    ]
    gauges = GpuGauges(lambda: readings)
    gauges.start()
    try:
        text = Metrics(sources=[gauges]).render({})
    finally:
        gauges.stop()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    values = {
        (name, sample.labels["gpu_uuid"]): sample.value
        for name, family in families.items()
        if name.startswith("nv_")
        for sample in family.samples
    }
    assert values == {
        ("nv_gpu_utilization", UUID): 0.5,
        ("nv_gpu_memory_total_bytes", UUID): 8e9,
        ("nv_gpu_memory_used_bytes", UUID): 1e9,
        ("nv_gpu_power_usage", UUID): 120.5,
        ("nv_gpu_power_limit", UUID): 700.0,
        ("nv_energy_consumption", UUID): 42.0,
        ("nv_gpu_memory_total_bytes", "GPU-2"): 4e9,
        ("nv_gpu_memory_used_bytes", "GPU-2"): 0.0,
    }
    assert families["nv_gpu_utilization"].type == "gauge"


def test_cuda_visible_devices_by_index_or_uuid():
    assert _visible(0, UUID, None)
    assert _visible(1, UUID, "0,1") and not _visible(2, UUID, "0,1")
    assert _visible(3, UUID, "GPU-1234") and not _visible(3, UUID, "GPU-9")
    assert not _visible(0, UUID, "")
