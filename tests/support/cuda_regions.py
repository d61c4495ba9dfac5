"""A client's CUDA shared memory region as tritonclient's cuda_shared_memory makes one
(cudaMalloc + cudaIpcGetMemHandle through cuda-python), and its registration over REST: what
the GPU tests of CUDA shared memory requests share."""

from __future__ import annotations

import base64
import ctypes

import httpx
import numpy as np
from cuda.bindings import runtime as rt


def ok(result):
    err, *values = result
    assert err == rt.cudaError_t.cudaSuccess, err
    return values[0] if len(values) == 1 else values


class DeviceRegion:
    """A device allocation and its IPC handle, as a client exports it."""

    def __init__(self, nbytes: int):
        ok(rt.cudaSetDevice(0))
        self.nbytes = nbytes
        self.pointer = int(ok(rt.cudaMalloc(nbytes)))
        handle = ok(rt.cudaIpcGetMemHandle(self.pointer))
        self.raw_handle = bytes((ctypes.c_char * 64).from_address(handle.getPtr()))

    def write(self, array: np.ndarray, offset: int = 0) -> None:
        kind = rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        ok(rt.cudaMemcpy(self.pointer + offset, array.ctypes.data, array.nbytes, kind))

    def read(self, shape, offset: int = 0) -> np.ndarray:
        out = np.empty(shape, np.float32)
        kind = rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        ok(rt.cudaMemcpy(out.ctypes.data, self.pointer + offset, out.nbytes, kind))
        return out

    def free(self) -> None:
        ok(rt.cudaFree(self.pointer))


def register(server, name, region, byte_size=None):
    body = {
        "raw_handle": {"b64": base64.b64encode(region.raw_handle).decode()},
        "device_id": 0,
        "byte_size": region.nbytes if byte_size is None else byte_size,
    }
    return httpx.post(f"{server.url}/v2/cudasharedmemory/region/{name}/register", json=body)
