"""A request input that stays in device memory (a CUDA shared memory region), as the engine
hands it to the native host.

It describes the bytes by the CUDA array interface (address, shape, typestr), which the host
reads instead of a host buffer: an input the program leaves out of memory planning is then
bound at that address, so a TensorRT delegate reads the client's device memory directly
(staging it only when it is off a 256-byte boundary), and a planned one is copied by the host
on the device's stream (ethost.device_input_counts() counts which). The dataplane only reads
its shape and dtype; anything that needs the values as a host array (np.asarray, e.g. dynamic
batching merging requests) gets a copy from the device, reported through `on_copy`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from service import cuda


@dataclass(frozen=True, eq=False)
class DeviceArray:
    address: int
    shape: tuple[int, ...]
    dtype: np.dtype
    device_id: int
    on_copy: Callable[[], None] | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.address, True),
            "strides": None,
            "version": 3,
        }

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        host = np.empty(self.shape, self.dtype)
        if host.nbytes:
            cuda.copy(host.ctypes.data, self.address, host.nbytes, self.device_id)
        if self.on_copy is not None:
            self.on_copy()
        return host if dtype is None else host.astype(dtype, copy=False)
