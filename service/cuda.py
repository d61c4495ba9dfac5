"""The server's CUDA side in Python, through cuda-python (`cuda.bindings`), which is optional:
a CPU host runs without it, and then CUDA shared memory is refused with a message saying so.

It opens the CUDA IPC handles clients register (cudaIpcOpenMemHandle maps another process's
allocation into this one, on the device it lives on; service/shm/), copies between such memory
and the host where a program needs host tensors, and reads the device figures that /metrics and
the TensorRT mismatch messages quote (name, compute capability, memory total and used).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

try:
    from cuda.bindings import runtime as _rt
except ImportError:  # a CPU host: nothing here is used
    _rt = None

IPC_HANDLE_BYTES = 64  # CUDA_IPC_HANDLE_SIZE


class CudaUnavailable(Exception):
    """This host cannot open CUDA memory; the message says why."""


class CudaFailed(Exception):
    """A CUDA call failed; the message carries CUDA's own words."""


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    compute_capability: str  # "9.0"
    total_bytes: int
    used_bytes: int
    uuid: str = ""  # as NVML and nvidia-smi write it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx


def _check(result, what: str):
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != _rt.cudaError_t.cudaSuccess:
        _, text = _rt.cudaGetErrorString(err)
        raise CudaFailed(f"{what} failed: {text.decode(errors='replace')} ({err.name})")
    return values[0] if len(values) == 1 else values


def device_count() -> int:
    """Devices this process can use (0 when cuda-python, the driver or a device is missing)."""
    if _rt is None:
        return 0
    err, count = _rt.cudaGetDeviceCount()
    return count if err == _rt.cudaError_t.cudaSuccess else 0


def unavailable_reason() -> str | None:
    """Why CUDA memory cannot be opened here, or None when it can."""
    if _rt is None:
        return "cuda-python (the cuda.bindings package) is not installed in the server"
    err, count = _rt.cudaGetDeviceCount()
    if err != _rt.cudaError_t.cudaSuccess:
        _, text = _rt.cudaGetErrorString(err)
        return f"this host has no usable CUDA device ({text.decode(errors='replace')})"
    if count == 0:
        return "this host has no CUDA device"
    return None


def open_ipc(raw_handle: bytes, device_id: int) -> int:
    """The device address of another process's allocation, mapped here on `device_id`."""
    reason = unavailable_reason()
    if reason is not None:
        raise CudaUnavailable(reason)
    _check(_rt.cudaSetDevice(device_id), f"cudaSetDevice({device_id})")
    handle = _rt.cudaIpcMemHandle_t()
    # The handle's bytes are the C struct itself; the binding exposes its address.
    ctypes.memmove(handle.getPtr(), raw_handle, IPC_HANDLE_BYTES)
    flags = getattr(_rt, "cudaIpcMemLazyEnablePeerAccess", 1)
    return int(_check(_rt.cudaIpcOpenMemHandle(handle, flags), "cudaIpcOpenMemHandle"))


def close_ipc(address: int, device_id: int) -> None:
    _check(_rt.cudaSetDevice(device_id), f"cudaSetDevice({device_id})")
    _check(_rt.cudaIpcCloseMemHandle(address), "cudaIpcCloseMemHandle")


def copy(dst: int, src: int, nbytes: int, device_id: int) -> None:
    """A synchronous copy in whichever direction the addresses say (cudaMemcpyDefault)."""
    _check(_rt.cudaSetDevice(device_id), f"cudaSetDevice({device_id})")
    _check(_rt.cudaMemcpy(dst, src, nbytes, _rt.cudaMemcpyKind.cudaMemcpyDefault), "cudaMemcpy")


def pointer_device(address: int) -> int:
    """The device a CUDA allocation lives on (an embedding program's tensor names only its
    address: __cuda_array_interface__ carries no device)."""
    if _rt is None:
        raise CudaUnavailable("this host has no CUDA runtime (cuda-bindings is not installed)")
    attributes = _check(_rt.cudaPointerGetAttributes(address), "cudaPointerGetAttributes")
    if attributes.type != _rt.cudaMemoryType.cudaMemoryTypeDevice:
        raise CudaFailed(f"address {address:#x} is not device memory")
    return int(attributes.device)


def devices() -> list[DeviceInfo]:
    """Every device's name, compute capability and memory figures (none without CUDA)."""
    found = []
    for index in range(device_count()):
        try:
            props = _check(_rt.cudaGetDeviceProperties(index), "cudaGetDeviceProperties")
            _check(_rt.cudaSetDevice(index), f"cudaSetDevice({index})")
            free, total = _check(_rt.cudaMemGetInfo(), "cudaMemGetInfo")
        except CudaFailed:
            continue
        found.append(
            DeviceInfo(
                index,
                _name(props),
                f"{props.major}.{props.minor}",
                int(total),
                int(total - free),
                _uuid(props),
            )
        )
    return found


def _uuid(props) -> str:
    raw = bytes(getattr(props.uuid, "bytes", b""))[:16]
    if len(raw) != 16:
        return ""
    text = raw.hex()
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def _name(props) -> str:
    name = props.name
    if isinstance(name, bytes):
        name = name.split(b"\0", 1)[0].decode(errors="replace")
    return str(name)


def allocation_bytes(address: int) -> int | None:
    """Bytes of the allocation `address` starts in, from the driver; None if it cannot say."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    err, base, size = driver.cuMemGetAddressRange(address)
    if err != driver.CUresult.CUDA_SUCCESS:
        return None
    return int(size) - (address - int(base))


def describe(index: int = 0) -> str | None:
    """ "NVIDIA H200 (compute capability 9.0)" for a device, None without one. Reads only the
    device's properties: no context is created (which would take device memory)."""
    if index >= device_count():
        return None
    try:
        props = _check(_rt.cudaGetDeviceProperties(index), "cudaGetDeviceProperties")
    except CudaFailed:
        return None
    return f"{_name(props)} (compute capability {props.major}.{props.minor})"
