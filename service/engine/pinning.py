"""Pins the fronts' arenas for the GPU, so request tensors reach it at pinned bandwidth.

On a discrete GPU every host buffer a TensorRT delegate is given is copied to the device; from
pageable memory that copy runs at a fraction of the link's speed (measured on the H200: 11-18 GB/s
pageable against 54 GB/s pinned). Registering an arena with CUDA (cudaHostRegister, through the
native host) makes every such copy from it a pinned one. A GPU that reads host memory directly
(Jetson) needs no copy, and a host without CUDA has nothing to pin: both leave arenas as they are.
Pinning commits and locks the whole arena, which is why its size is a setting (--arena-bytes).
"""

from __future__ import annotations

import logging

from service.shared.arena import Region

log = logging.getLogger(__name__)


def pin(region: Region) -> bool:
    """True when the region is now pinned for the GPU (and must be unpinned before it goes)."""
    try:
        import ethost
    except ImportError:
        return False
    register = getattr(ethost, "pin_host_memory", None)
    if register is None:
        return False
    try:
        pinned = bool(register(region.address, region.size))
    except RuntimeError as exc:  # CUDA said no: run unpinned, which is slower, not wrong
        log.warning("could not pin a front's arena of %d bytes: %s", region.size, exc)
        return False
    region.pinned = pinned
    return pinned


def unpin(region: Region) -> None:
    if getattr(region, "pinned", False):
        import ethost

        ethost.unpin_host_memory(region.address)
        region.pinned = False
