"""The CUDA driver API through ctypes: which devices exist, and the context TensorRT's calls run
in (runtime.py makes them). Its failures are TensorRTErrors: a missing driver or device is why a
TensorRT call cannot be made, and callers tell the two apart by the message only.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from contextlib import contextmanager

_CUDA_SUCCESS = 0
_CUDA_ERROR_NO_DEVICE = 100


class TensorRTError(RuntimeError):
    """A TensorRT call failed; the message carries what TensorRT logged while it ran."""


class CudaDriver:
    """The CUDA driver API through ctypes, for device discovery and selection.

    The driver library ships with the GPU driver itself, so this works wherever a GPU is usable,
    without tying the service to one CUDA runtime or array library. TensorRT's own CUDA runtime
    calls follow the driver context made current here.
    """

    def __init__(self):
        self.reason = ""
        self._primary = {}
        self._lock = threading.Lock()
        try:
            self._lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            self._lib = None
            self.reason = f"no CUDA driver (libcuda.so.1 cannot be loaded: {exc})"
            return
        rc = self._lib.cuInit(0)
        if rc == _CUDA_ERROR_NO_DEVICE:
            self.reason = "no CUDA device (cuInit: CUDA_ERROR_NO_DEVICE)"
        elif rc != _CUDA_SUCCESS:
            self.reason = f"the CUDA driver failed to initialize (cuInit: {self.error_name(rc)})"

    def error_name(self, rc: int) -> str:
        name = ctypes.c_char_p()
        if self._lib.cuGetErrorName(rc, ctypes.byref(name)) == _CUDA_SUCCESS and name.value:
            return name.value.decode()
        return f"CUDA error {rc}"

    def _check(self, rc: int, call: str) -> None:
        if rc != _CUDA_SUCCESS:
            raise TensorRTError(f"{call} failed: {self.error_name(rc)}")

    def device_count(self) -> int:
        if self.reason:
            return 0
        count = ctypes.c_int()
        self._check(self._lib.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
        return count.value

    @contextmanager
    def current(self, device_id: int):
        """Makes device_id's primary context current for the block, then restores the caller's.

        The primary context is retained once per process and never released, as the CUDA
        runtime does, so engines and contexts created in it outlive the block.
        """
        if self.reason:
            raise TensorRTError(self.reason)
        count = self.device_count()
        if not 0 <= device_id < count:
            raise TensorRTError(f"CUDA device {device_id} does not exist (this host has {count})")
        with self._lock:
            if device_id not in self._primary:
                device, context = ctypes.c_int(), ctypes.c_void_p()
                self._check(self._lib.cuDeviceGet(ctypes.byref(device), device_id), "cuDeviceGet")
                self._check(
                    self._lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), device),
                    "cuDevicePrimaryCtxRetain",
                )
                self._primary[device_id] = context
        self._check(self._lib.cuCtxPushCurrent_v2(self._primary[device_id]), "cuCtxPushCurrent")
        try:
            yield
        finally:
            self._check(
                self._lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p())), "cuCtxPopCurrent"
            )


@functools.cache
def cuda_driver() -> CudaDriver:
    return CudaDriver()


def device_count() -> int:
    """CUDA devices usable here; 0 when the driver or any device is missing."""
    try:
        return cuda_driver().device_count()
    except TensorRTError:
        return 0
