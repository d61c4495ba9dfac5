"""The one dtype table: ExecuTorch scalar types, the host's dtype names, numpy and OIP datatypes.

numpy has no bfloat16, so BF16 tensors travel through the server (and the native host) as uint16
arrays holding the bit patterns; `carrier` is the numpy dtype an array of that type has here.
UINT16 and UINT32 exist in ExecuTorch programs but have no Open Inference Protocol datatype that
the host can feed, so they are described but not served.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    scalar_type: int  # ExecuTorch ScalarType id, as stored in a .pte
    name: str  # the native host's name (numpy's, plus "bfloat16")
    itemsize: int
    datatype: str | None  # Open Inference Protocol datatype; None: not served
    carrier: np.dtype  # numpy dtype of an array of this type inside the server


_TABLE = (
    DType(0, "uint8", 1, "UINT8", np.dtype(np.uint8)),
    DType(1, "int8", 1, "INT8", np.dtype(np.int8)),
    DType(2, "int16", 2, "INT16", np.dtype(np.int16)),
    DType(3, "int32", 4, "INT32", np.dtype(np.int32)),
    DType(4, "int64", 8, "INT64", np.dtype(np.int64)),
    DType(5, "float16", 2, "FP16", np.dtype(np.float16)),
    DType(6, "float32", 4, "FP32", np.dtype(np.float32)),
    DType(7, "float64", 8, "FP64", np.dtype(np.float64)),
    DType(11, "bool", 1, "BOOL", np.dtype(np.bool_)),
    DType(15, "bfloat16", 2, "BF16", np.dtype(np.uint16)),
    DType(27, "uint16", 2, None, np.dtype(np.uint16)),
    DType(28, "uint32", 4, None, np.dtype(np.uint32)),
)
BY_SCALAR_TYPE = {d.scalar_type: d for d in _TABLE}
BY_NAME = {d.name: d for d in _TABLE}
BY_DATATYPE = {d.datatype: d for d in _TABLE if d.datatype is not None}
DATATYPES = tuple(BY_DATATYPE)


def datatype_of(dtype_name: str) -> str | None:
    entry = BY_NAME.get(dtype_name)
    return entry.datatype if entry else None


def carrier_of(datatype: str) -> np.dtype:
    return BY_DATATYPE[datatype].carrier


# Triton's model configuration names datatypes TYPE_<datatype>, except BYTES (TYPE_STRING).
_TRITON_NAMES = {"BYTES": "TYPE_STRING"}
TRITON_INVALID = "TYPE_INVALID"


def triton_type(datatype: str | None) -> str:
    """TYPE_FP32 and so on; TYPE_INVALID for a dtype no protocol datatype exists for."""
    if datatype is None:
        return TRITON_INVALID
    return _TRITON_NAMES.get(datatype, f"TYPE_{datatype}")


def datatype_of_triton(name: str) -> str | None:
    """The protocol datatype of a Triton TYPE_ name this server serves; None otherwise."""
    return next((d for d in DATATYPES if triton_type(d) == name), None)
