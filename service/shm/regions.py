"""The engine's registry of client shared memory regions, system and CUDA, and the calls the
fronts make on it (register, status, unregister: the extensions' three operations each).

Registration is off unless the server runs with --allow-client-shm (ETRT_ALLOW_CLIENT_SHM): a
registered region lets a client have the engine read and write its memory, which a server
shared by several local users must not offer by default. The number of regions is bounded
(--shm-max-regions) because each holds a mapping and a descriptor in the engine. A region in
use by a request cannot be unregistered (409) until that request is done; every region is
released on unregister and when the engine stops.
"""

from __future__ import annotations

import asyncio
import logging

from service import cuda
from service.errors import Conflict, Forbidden, Invalid, NotFound, Problem, clip
from service.shm.system import SystemRegion

log = logging.getLogger(__name__)
KINDS = ("system", "cuda")
FLAG = "--allow-client-shm (ETRT_ALLOW_CLIENT_SHM=1)"


def _refuse(rule: str, message: str) -> Invalid:
    return Invalid(message, [Problem(None, rule, message)])


class CudaRegion:
    """A client's device allocation, opened from its CUDA IPC handle on its device."""

    kind = "cuda"

    def __init__(self, name: str, raw_handle: bytes, device_id: int, byte_size: int):
        label = f"region {clip(name)!r}"
        if len(raw_handle) != cuda.IPC_HANDLE_BYTES:
            raise _refuse(
                "shm.handle",
                f"{label}: raw_handle must be a CUDA IPC handle of {cuda.IPC_HANDLE_BYTES} "
                f"bytes, got {len(raw_handle)}",
            )
        if byte_size <= 0:
            raise _refuse("shm.size", f"{label}: byte_size must be positive")
        count = cuda.device_count()
        if not 0 <= device_id < count:
            raise _refuse(
                "shm.device",
                f"{label}: device_id {device_id} is not one of this host's {count} CUDA device(s)",
            )
        try:
            self.address = cuda.open_ipc(raw_handle, device_id)
        except cuda.CudaFailed as exc:
            raise _refuse(
                "shm.handle", f"{label}: cannot open the CUDA IPC handle: {exc}"
            ) from None
        size = cuda.allocation_bytes(self.address)
        if size is not None and byte_size > size:
            cuda.close_ipc(self.address, device_id)
            raise _refuse(
                "shm.size",
                f"{label}: byte_size {byte_size} is larger than the CUDA allocation behind the "
                f"handle ({size} bytes)",
            )
        self.name, self.device_id, self.byte_size = name, device_id, byte_size
        self.in_use = 0

    def check_intact(self) -> None:
        """An opened IPC mapping stays valid until closed here, whatever the client does."""

    def status(self) -> dict:
        return {"name": self.name, "device_id": self.device_id, "byte_size": self.byte_size}

    def close(self) -> None:
        try:
            cuda.close_ipc(self.address, self.device_id)
        except cuda.CudaFailed as exc:
            log.warning("closing CUDA region %r: %s", self.name, exc)


class SharedMemory:
    """The regions of one engine; its `shm_*` coroutines are what fronts call by name."""

    def __init__(self, settings):
        self.allowed = settings.allow_client_shm
        self.limit = settings.shm_max_regions
        self.regions: dict[str, dict[str, SystemRegion | CudaRegion]] = {k: {} for k in KINDS}
        # Copies the engine made because a region could not be bound where it is, by
        # (kind, reason); /metrics reports them (service/shm/metrics.py).
        self.copies: dict[tuple[str, str], int] = {}
        # System region tensors bound where they lie, by kind: inputs viewed in place, outputs
        # the host wrote into their window (CUDA ones are counted by the host itself).
        self.bound: dict[str, int] = {}
        # Inference requests with tensors in regions, by how the engine served them: "inline"
        # at once on its thread (Dispatch.serve_now), "queued" through ModelService.infer.
        self.requests: dict[str, int] = {}
        # The engine's native lane (an ethost.LaneHub), which binds lane requests' tensors in
        # regions itself: it is told of each one mapped (or opened) here, before any request
        # can name it, and each is taken from it before it is unmapped (or closed; refused
        # while in use). It looks a name up as lookup() does, system regions first.
        self.lane = None

    def _admit(self, kind: str, name) -> None:
        if not self.allowed:
            raise Forbidden(
                f"{kind} shared memory is off on this server: start it with {FLAG} to let "
                "clients register regions"
            )
        if not isinstance(name, str) or not name:
            raise _refuse("shm.name", "a shared memory region needs a name")
        if name in self.regions[kind]:
            raise Conflict(f"{kind} shared memory region {clip(name)!r} is already registered")
        held = sum(len(r) for r in self.regions.values())
        if held >= self.limit:
            raise _refuse(
                "shm.count",
                f"region {clip(name)!r}: this server holds at most {self.limit} shared memory "
                f"regions (--shm-max-regions) and has {held}; unregister one first",
            )

    async def shm_register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self._admit("system", name)
        for field, value in (("offset", offset), ("byte_size", byte_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise _refuse(
                    "shm.parameter",
                    f"region {clip(name)!r}: {field} must be a non-negative integer",
                )
        region = SystemRegion(name, key, offset, byte_size)
        self.regions["system"][name] = region
        if self.lane is not None:
            needed = region.offset + region.byte_size
            self.lane.add_shm_region(name, region.address, region.byte_size, region.fd, needed)
        log.info(
            "system shared memory region %r registered (key %r, %d bytes)", name, key, byte_size
        )

    async def shm_register_cuda(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        self._admit("cuda", name)
        reason = cuda.unavailable_reason()
        if reason is not None:
            raise _refuse(
                "shm.cuda",
                f"region {clip(name)!r}: CUDA shared memory cannot be registered: {reason}",
            )
        region = await asyncio.to_thread(CudaRegion, name, raw_handle, device_id, byte_size)
        if name in self.regions["cuda"]:  # registered meanwhile by another request
            region.close()
            raise Conflict(f"cuda shared memory region {clip(name)!r} is already registered")
        self.regions["cuda"][name] = region
        if self.lane is not None:
            self.lane.add_shm_region(name, region.address, region.byte_size, -1, 0, device_id)
        log.info("CUDA shared memory region %r registered (device %d)", name, device_id)

    async def shm_status(self, kind: str, name: str | None = None) -> list[dict]:
        regions = self.regions[kind]
        if name:
            if name not in regions:
                raise NotFound(f"no {kind} shared memory region is named {clip(name)!r}")
            return [regions[name].status()]
        return [regions[n].status() for n in sorted(regions)]

    async def shm_unregister(self, kind: str, name: str | None = None) -> None:
        """One region, or every region of the kind when `name` is empty (as Triton does)."""
        regions = self.regions[kind]
        if name and name not in regions:
            raise NotFound(f"no {kind} shared memory region is named {clip(name)!r}")
        names = [name] if name else list(regions)
        busy = [(n, regions[n].in_use) for n in names if regions[n].in_use]
        if not busy and self.lane is not None:
            # none removed while one is in use
            in_lane = self.lane.remove_shm_regions(names, kind == "cuda")
            busy = [in_lane] if in_lane[1] else []
        if busy:
            raise Conflict(
                f"{kind} shared memory region {clip(busy[0][0])!r} is in use by "
                f"{busy[0][1]} request(s); unregister it once they are answered"
            )
        for n in names:
            regions.pop(n).close()

    def lookup(self, name: str) -> SystemRegion | CudaRegion | None:
        return self.regions["system"].get(name) or self.regions["cuda"].get(name)

    def count_copy(self, kind: str, reason: str) -> None:
        self.copies[(kind, reason)] = self.copies.get((kind, reason), 0) + 1

    def count_bound(self, kind: str) -> None:
        self.bound[kind] = self.bound.get(kind, 0) + 1

    def count_request(self, path: str) -> None:
        self.requests[path] = self.requests.get(path, 0) + 1

    def lane_served(self) -> tuple[int, int, int]:
        """(requests the native lane served with tensors in regions, their tensors in system
        regions bound where they lie, outputs it copied from the host into CUDA regions)."""
        if self.lane is None:
            return (0, 0, 0)
        return (*self.lane.shm_served, self.lane.shm_to_device)

    def close(self) -> None:
        """At the engine's end, once the lane's link threads stopped (nothing of it in use)."""
        if self.lane is not None:
            self.lane.remove_shm_regions(list(self.regions["system"]))
            self.lane.remove_shm_regions(list(self.regions["cuda"]), True)
        for regions in self.regions.values():
            for region in regions.values():
                region.close()
            regions.clear()
