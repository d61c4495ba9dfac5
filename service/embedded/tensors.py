"""An embedding program's input tensors as the dataplane takes them, without copying their bytes.

- numpy arrays (and anything numpy can view: the buffer protocol, host DLPack) are used as they
  are when C-contiguous;
- device tensors (CuPy, PyTorch CUDA, Numba: `__cuda_array_interface__`; any CUDA DLPack
  producer) become service.shm.device_array.DeviceArray, the same record a CUDA shared memory
  input becomes in the server: the native host binds it at its address where the program leaves
  the input out of memory planning (a TensorRT delegate reads it in place), or copies it on the
  device where the program plans it. Nothing here copies device memory to the host.

Each conversion returns the objects that keep the memory alive (a DLPack capsule, whose producer
frees the tensor when it is collected); the caller holds them until the request is answered.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np

from service import cuda, rules
from service.dataplane.types import Tensor
from service.dtypes import BY_NAME
from service.errors import invalid
from service.shm.device_array import DeviceArray

_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
# DLDataType codes: int, uint, float, bfloat, bool
_DL_KINDS = {0: "i", 1: "u", 2: "f", 4: "bfloat", 6: "b"}


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def to_tensor(name: str | None, value: object) -> tuple[Tensor, object]:
    """(the dataplane's Tensor, what keeps its memory alive) for one input."""
    label = f"input {name!r}" if name is not None else "an input"
    if isinstance(value, np.ndarray):
        return Tensor(name, _datatype(label, value.dtype), _contiguous(label, value)), value
    if hasattr(value, "__cuda_array_interface__"):
        return _from_cai(name, label, value), value
    if hasattr(value, "__dlpack_device__"):
        device_type, _ = value.__dlpack_device__()
        if device_type in (_DL_CUDA, _DL_CUDA_MANAGED):
            return _from_dlpack_capsule(name, label, value)
        if device_type in (_DL_CPU, _DL_CUDA_HOST):
            array = np.from_dlpack(value)
            return Tensor(name, _datatype(label, array.dtype), _contiguous(label, array)), value
        raise invalid(rules.INPUT_DATATYPE, f"{label} is on DLPack device type {device_type}")
    array = np.asarray(value)
    return Tensor(name, _datatype(label, array.dtype), _contiguous(label, array)), array


def _datatype(label: str, dtype: np.dtype) -> str:
    entry = BY_NAME.get(dtype.name)
    if entry is None or entry.datatype is None:
        raise invalid(rules.INPUT_DATATYPE, f"{label} has dtype {dtype}, which no method takes")
    return entry.datatype


def _contiguous(label: str, array: np.ndarray) -> np.ndarray:
    """The array itself when C-contiguous; otherwise a copy (numpy's own layout rules)."""
    return array if array.flags.c_contiguous else np.ascontiguousarray(array)


def _dense(label: str, shape: tuple[int, ...], strides, itemsize: int) -> None:
    """Device memory cannot be re-laid out here without a copy on the device: refuse gaps."""
    if strides is None:
        return
    expected, step = [], itemsize
    for extent in reversed(shape):
        expected.append(step)
        step *= extent
    if any(e > 1 and s != w for e, s, w in zip(shape, strides, reversed(expected))):
        raise invalid(
            rules.INPUT_SHAPE,
            f"{label} is a strided device tensor; send a contiguous one (e.g. .contiguous())",
        )


def _from_cai(name: str | None, label: str, value) -> Tensor:
    interface = value.__cuda_array_interface__
    dtype = np.dtype(interface["typestr"])
    shape = tuple(int(d) for d in interface["shape"])
    _dense(label, shape, interface.get("strides"), dtype.itemsize)
    address = int(interface["data"][0])
    device = cuda.pointer_device(address) if math.prod(shape) else 0
    return Tensor(name, _datatype(label, dtype), DeviceArray(address, shape, dtype, device))


def _from_dlpack_capsule(name: str | None, label: str, value) -> tuple[Tensor, object]:
    """A CUDA DLPack tensor read from its capsule (DLPack's ABI, dlpack.h: DLManagedTensor
    starts with its DLTensor). The capsule stays unconsumed: held until the request is answered,
    its producer frees the tensor once it is collected."""
    capsule = value.__dlpack__()
    tensor = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    kind = _DL_KINDS.get(code)
    if kind is None or lanes != 1:
        raise invalid(rules.INPUT_DATATYPE, f"{label} has DLPack dtype code {code}x{lanes}")
    if kind == "bfloat":
        dtype, datatype = np.dtype(np.uint16), "BF16"
    else:
        dtype = np.dtype(f"{kind}{bits // 8}") if kind != "b" else np.dtype(np.bool_)
        datatype = _datatype(label, dtype)
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    strides = None
    if tensor.strides:
        strides = tuple(tensor.strides[i] * dtype.itemsize for i in range(tensor.ndim))
    _dense(label, shape, strides, dtype.itemsize)
    address = (tensor.data or 0) + tensor.byte_offset
    array = DeviceArray(address, shape, dtype, int(tensor.device.device_id))
    return Tensor(name, datatype, array), (value, capsule)
