"""What /metrics says about shared memory, rendered with the dataplane's families: the regions
registered, the copies made for them (the engine's own and the native host's), the CUDA inputs
bound without one, and the device memory each model took when it was opened (read through
cuda-python when it is installed and a device exists). The GPUs' own gauges are
service/gpu_gauges.py's."""

from __future__ import annotations

import sys

from service import cuda
from service.prometheus import Counter, Gauge
from service.shm.regions import KINDS, SharedMemory


def _locked_bytes() -> int | None:
    """Bytes of instances' host memory page-locked for copies to and from CUDA memory (the
    native host locks a buffer on its first such copy); None before it is imported."""
    host = sys.modules.get("ethost")
    return None if host is None else host.pinned_host_buffers()["locked_bytes"]


def _native_counts() -> tuple[dict[str, int], dict[str, int]]:
    """What the native host did with inputs and outputs in device memory (only CUDA shared
    memory gives it any); nothing before it is imported."""
    host = sys.modules.get("ethost")
    if host is None:
        return {}, {}
    return host.device_input_counts(), host.device_output_counts()


class ShmMetrics:
    """Families for Metrics.render (it takes backend metrics objects with families())."""

    def __init__(self, memory: SharedMemory):
        self.memory = memory
        # Device memory each model took when its instances were opened (CUDA hosts only).
        self.model_bytes: dict[str, int] = {}

    def open(self, model: str, open_pool):
        """Opens the pool, measuring the device memory that opening took (other allocations
        at the same moment count too: a figure at load, not a live one)."""
        before = sum(d.used_bytes for d in cuda.devices()) if cuda.device_count() else None
        pool = open_pool()
        if before is not None:
            after = sum(d.used_bytes for d in cuda.devices())
            self.model_bytes[model] = max(after - before, 0)
        return pool

    def forget(self, model: str) -> None:
        self.model_bytes.pop(model, None)

    def describe(self, model: str) -> dict:
        taken = self.model_bytes.get(model)
        return {} if taken is None else {"device_bytes_at_load": taken}

    def families(self) -> list:
        regions = Gauge(
            "etrt_shm_regions", "Client shared memory regions registered, by kind", ("kind",)
        )
        for kind in KINDS:
            regions.samples[(kind,)] = len(self.memory.regions[kind])
        copies = Counter(
            "etrt_shm_copies_total",
            "Tensors the engine copied instead of binding them in their shared memory region "
            "(misaligned: a system region's input off a 256-byte boundary, copied to an aligned "
            "buffer; to_host: a CUDA input copied into a buffer the program plans in host memory; "
            "device_to_device: a CUDA input or output copied between it and a buffer planned in "
            "device memory; from_host: a CUDA output copied from host memory). A TensorRT "
            "delegate's own staging of a bound tensor is etrt_tensorrt_staging_copies_total",
            ("kind", "reason"),
        )
        for labels, count in self.memory.copies.items():
            copies.samples[labels] = count
        bound = Counter(
            "etrt_shm_bound_total",
            "Shared memory tensors used where they lie, no copy: CUDA inputs and outputs handed "
            "to the program at their device address (tensors left out of memory planning that "
            "only device delegates use); system inputs viewed in their region and system outputs "
            "the program wrote into their window",
            ("kind",),
        )
        inputs, outputs = _native_counts()
        bound.samples[("cuda",)] = inputs.get("bound", 0) + outputs.get("bound", 0)
        lane_requests, lane_bound, lane_to_device = self.memory.lane_served()
        bound.samples[("system",)] = self.memory.bound.get("system", 0) + lane_bound
        requests = Counter(
            "etrt_shm_requests_total",
            "Inference requests with tensors in shared memory regions, by how the engine served "
            "them (lane: by its native lane, without Python; inline: at once on its event loop, "
            "without a task; queued: through the scheduler, as any request that has to wait)",
            ("path",),
        )
        for path in ("inline", "queued"):
            requests.samples[(path,)] = self.memory.requests.get(path, 0)
        requests.samples[("lane",)] = lane_requests
        for reason in ("to_host", "device_to_device", "from_host"):
            key = ("cuda", reason)
            count = inputs.get(reason, 0) + outputs.get(reason, 0)
            copies.samples[key] = copies.samples.get(key, 0) + count
        key = ("cuda", "from_host")  # the lane's, as write_outputs counts its own
        copies.samples[key] = copies.samples.get(key, 0) + lane_to_device
        families = [regions, copies, bound, requests]
        locked = _locked_bytes()
        if locked is not None:
            gauge = Gauge(
                "etrt_shm_locked_host_bytes",
                "Host memory of method instances (planned buffers, and the instances' own for "
                "tensors left out of planning) page-locked for copies to and from CUDA memory "
                "(a buffer a CUDA input is copied into or a CUDA output out of is "
                "locked on its first copy, up to 256 MiB a buffer, and unlocked when its "
                "instance closes), in bytes",
            )
            gauge.samples[()] = locked
            families.append(gauge)
        if self.model_bytes:
            per_model = Gauge(
                "etrt_model_device_bytes",
                "Device memory a model took when its instances were opened, in bytes",
                ("model",),
            )
            for model, size in self.model_bytes.items():
                per_model.samples[(model,)] = size
            families.append(per_model)
        return families
