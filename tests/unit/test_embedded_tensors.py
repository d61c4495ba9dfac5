"""How the embedded engine takes an embedding program's tensors (service/embedded/tensors.py):
numpy arrays and host DLPack tensors used in place, a DLPack capsule read at the ABI's layout
(checked here on CPU tensors against torch's own address, shape and strides; the CUDA run is
tests/gpu/test_embedded_cuda.py), strided device tensors and unknown dtypes refused by name."""

import numpy as np
import pytest
import torch

from service.embedded.tensors import _from_dlpack_capsule, to_tensor
from service.errors import Invalid
from service.shm.device_array import DeviceArray


def test_numpy_and_host_dlpack_inputs_are_used_in_place():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensor, _ = to_tensor("x", array)
    assert tensor.array is array and tensor.datatype == "FP32" and tensor.name == "x"
    source = torch.arange(6, dtype=torch.int64).reshape(2, 3)
    tensor, _ = to_tensor(None, source)
    assert tensor.datatype == "INT64" and tensor.array.shape == (2, 3)
    assert tensor.array.ctypes.data == source.data_ptr()  # a view, not a copy


def test_a_strided_host_array_is_made_contiguous_and_lists_become_arrays():
    strided = np.arange(12, dtype=np.float32).reshape(3, 4).T
    tensor, _ = to_tensor("x", strided)
    assert tensor.array.flags.c_contiguous and np.array_equal(tensor.array, strided)
    tensor, _ = to_tensor("y", [[1.0, 2.0]])
    assert tensor.datatype == "FP64" and tensor.array.shape == (1, 2)


def test_a_dlpack_capsule_is_read_at_its_layout():
    source = torch.arange(20, dtype=torch.float16).reshape(4, 5)[1:]  # a byte offset
    tensor, keep = _from_dlpack_capsule("x", "input 'x'", source)
    array = tensor.array
    assert isinstance(array, DeviceArray) and tensor.datatype == "FP16"
    assert array.address == source.data_ptr() and array.shape == (3, 5)
    assert array.dtype == np.float16 and keep[0] is source
    bf16, _ = _from_dlpack_capsule("b", "input 'b'", torch.zeros(2, dtype=torch.bfloat16))
    assert bf16.datatype == "BF16" and bf16.array.dtype == np.uint16


def test_strided_device_tensors_and_unknown_dtypes_are_refused_naming_the_input():
    transposed = torch.zeros(4, 5).t()
    with pytest.raises(Invalid, match="input 'x' is a strided device tensor"):
        _from_dlpack_capsule("x", "input 'x'", transposed)
    with pytest.raises(Invalid, match="input 'c' has dtype complex64"):
        to_tensor("c", np.zeros(2, np.complex64))
