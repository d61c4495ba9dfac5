"""GPU gauges under Triton's metric names, so tools written for Triton read this server unchanged.

model-analyzer's remote mode and dashboards built for Triton parse `nv_gpu_utilization` (0-1),
`nv_gpu_memory_total_bytes`, `nv_gpu_memory_used_bytes`, `nv_gpu_power_usage` (W),
`nv_gpu_power_limit` (W) and `nv_energy_consumption` (J since the server started), each labelled
`gpu_uuid`. They come from NVML (`nvidia-ml-py`, the `cuda` extra), read by one sampler thread
once a second as Triton does, so a scrape never waits on the driver and never stalls behind
inference work.

Where NVML is missing the gauges are absent, never zero: a zero would read as an idle GPU. Where
NVML answers only some queries, each gauge a device does not support is left out for that device
and the rest are reported. Jetson's integrated GPUs have no NVML on most JetPack releases: there
the CUDA runtime (cuda-python) gives the memory gauges alone (total and used, read as the device's
free memory says), and utilization, power and energy are absent (tegrastats reports them).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from service.prometheus import Counter, Family, Gauge

log = logging.getLogger(__name__)

# Seconds between samples; Triton samples its GPU metrics once a second too.
SAMPLE_INTERVAL_S = 1.0

# (name, help, kind) in the order Triton lists them.
_FAMILIES = (
    ("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", Gauge),
    ("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", Gauge),
    ("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", Gauge),
    ("nv_gpu_power_usage", "GPU power usage in watts", Gauge),
    ("nv_gpu_power_limit", "GPU power management limit in watts", Gauge),
    ("nv_energy_consumption", "GPU energy consumption in joules since the server started", Counter),
)


@dataclass
class DeviceSample:
    """One device's readings; None where the device does not report that quantity."""

    uuid: str
    values: dict[str, float] = field(default_factory=dict)


def _visible(index: int, uuid: str, visible: str | None) -> bool:
    """Whether CUDA_VISIBLE_DEVICES (indices or UUID prefixes) lets this process use the device."""
    if visible is None:
        return True
    for item in (part.strip() for part in visible.split(",")):
        if not item:
            continue
        if item.isdigit() and int(item) == index:
            return True
        if not item.isdigit() and uuid.startswith(item):
            return True
    return False


class NvmlReader:
    """The devices this process may use, read through NVML (`open()`: None without NVML)."""

    def __init__(self, nvml, handles: list[tuple[str, object]]):
        self._nvml = nvml
        self._handles = handles
        self._energy_start: dict[str, float] = {}

    @classmethod
    def open(cls) -> NvmlReader | None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            return None
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            handles = []
            for index in range(count):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = nvml.nvmlDeviceGetUUID(handle)
                uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
                if _visible(index, uuid, visible):
                    handles.append((uuid, handle))
        except Exception as exc:  # NVMLError: no driver, no device, a library without symbols
            log.info("GPU gauges are off: NVML did not start (%s)", exc)
            return None
        return cls(nvml, handles) if handles else None

    def _read(self, name: str, handle) -> float | None:
        nvml = self._nvml
        try:
            if name == "nv_gpu_utilization":
                return nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
            if name == "nv_gpu_memory_total_bytes":
                return float(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            if name == "nv_gpu_memory_used_bytes":
                return float(nvml.nvmlDeviceGetMemoryInfo(handle).used)
            if name == "nv_gpu_power_usage":
                return nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # milliwatts
            if name == "nv_gpu_power_limit":
                return nvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0
            if name == "nv_energy_consumption":
                return nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0  # millijoules
        except Exception:  # NVMLError_NotSupported and friends: this device lacks the query
            return None
        raise ValueError(name)

    def sample(self) -> list[DeviceSample]:
        samples = []
        for uuid, handle in self._handles:
            reading = DeviceSample(uuid)
            for name, _, _ in _FAMILIES:
                value = self._read(name, handle)
                if value is None:
                    continue
                if name == "nv_energy_consumption":
                    start = self._energy_start.setdefault(uuid, value)
                    value -= start
                reading.values[name] = value
            samples.append(reading)
        return samples


def _cuda_memory() -> list[DeviceSample]:
    from service import cuda

    return [
        DeviceSample(
            device.uuid or f"GPU-{device.index}",
            {
                "nv_gpu_memory_total_bytes": float(device.total_bytes),
                "nv_gpu_memory_used_bytes": float(device.used_bytes),
            },
        )
        for device in cuda.devices()
    ]


class GpuGauges:
    """The latest sample, rendered as metric families; sampled by a daemon thread."""

    def __init__(self, sample: Callable[[], list[DeviceSample]] | None):
        self._sample = sample
        self._latest: list[DeviceSample] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_nvml(cls) -> GpuGauges:
        """NVML's gauges; the CUDA runtime's memory gauges where NVML is absent; else none."""
        reader = NvmlReader.open()
        if reader is not None:
            return cls(reader.sample)
        from service import cuda

        return cls(_cuda_memory if cuda.device_count() else None)

    @property
    def active(self) -> bool:
        return self._sample is not None

    def start(self) -> None:
        if self._sample is None or self._thread is not None:
            return
        self._take()  # the first scrape already has figures
        self._thread = threading.Thread(target=self._run, name="gpu-gauges", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _take(self) -> None:
        try:
            taken = self._sample()
        except Exception:  # a driver hiccup must not end the sampler; the last figures stay
            log.exception("GPU gauges: sampling failed")
            return
        with self._lock:
            self._latest = taken

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            self._take()

    def families(self) -> list[Family]:
        with self._lock:
            latest = list(self._latest)
        if not latest:
            return []
        families = []
        for name, help_text, kind in _FAMILIES:
            family = kind(name, help_text, ("gpu_uuid",))
            for device in latest:
                if name in device.values:
                    family.samples[(device.uuid,)] = device.values[name]
            if family.samples:
                families.append(family)
        return families
