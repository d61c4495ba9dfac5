"""One request's tensors in shared memory, as the engine binds them.

System regions are mapped here, so an input is a view of the client's bytes at its address: no
copy when it sits on a 256-byte boundary (TensorRT's, and the arena's), a copy into an aligned
buffer otherwise, counted. A CUDA input is not copied here: it goes to the native host as a
DeviceArray (its device address), and the host binds it where the program leaves the input out
of memory planning (a TensorRT delegate then reads the region itself, or stages it when it is
off a 256-byte boundary, which the staging metric counts) or copies it into the planned buffer
on the device's stream (counted by the host; see ShmMetrics). A CUDA output goes to the native
host as its region's window (destinations()), which it writes into the same ways round: the
delegate writes an unplanned output there itself, a planned one is copied by the host from the
device or host buffer, counted; where that path is not taken (a batched request, a window
smaller than the output can be) it is copied from the host result here, counted. Outputs
requested into a region are written there and travel back without their bytes. The engine's
native lane copies an output whose window may not take its upper bound likewise (system or
CUDA), and hands one that then does not fit back with the values window_refusal words it from.

Every reference is checked against the region before any byte is touched: a region that does
not exist, a size that does not match the tensor, a window past the region's end or a region
whose object shrank are each a 400 naming the region.
"""

from __future__ import annotations

import numpy as np

from service import cuda
from service.dataplane.types import Tensor
from service.dtypes import BY_DATATYPE
from service.errors import Forbidden, Invalid, clip
from service.shared.arena import ALIGNMENT
from service.shm.device_array import DeviceArray
from service.shm.refs import SharedTensors, ShmRef, nbytes, refused
from service.shm.regions import FLAG, SharedMemory
from service.shm.system import shrank


def _aligned_empty(size: int) -> np.ndarray:
    """`size` bytes starting on a 256-byte boundary."""
    raw = np.empty(size + ALIGNMENT, np.uint8)
    skip = -raw.ctypes.data % ALIGNMENT
    return raw[skip : skip + size]


def outgrown(name: str, ref: ShmRef, nbytes: int) -> Invalid:
    """The refusal of output `name`, `nbytes` bytes, for the window `ref` names."""
    return refused(
        name,
        "shm.size",
        f"output {clip(name)!r} needs {nbytes} bytes, more than its "
        f"shared_memory_byte_size {ref.byte_size} in region {clip(ref.region)!r}",
        False,
    )


def window_refusal(failure, name: str, ref: ShmRef) -> Invalid:
    """What write_outputs refuses output `name` (its window `ref`) with, for the engine's
    native lane that ran the request and could not write it there (`failure`: an
    ethost.OutputWindowError, runtime_ext/lane/lane.h): its bytes outgrew the window, or the
    region's object shrank meanwhile."""
    if failure.shrunk_to is not None:
        return shrank(ref.region, failure.shrunk_to, failure.needed)
    return outgrown(name, ref, failure.nbytes)


class RequestShm:
    """Holds the request's regions in use (they cannot be unregistered) until close()."""

    def __init__(self, memory: SharedMemory, shared: SharedTensors):
        self.memory = memory
        self.shared = shared
        self.held = []
        self.intact: set[int] = set()  # regions checked (check_intact) for this request, by id
        if not memory.allowed:
            raise Forbidden(f"shared memory is off on this server: start it with {FLAG}")
        try:
            for name, ref in shared.inputs.items():
                self._hold(name, ref, True)
            for name, ref in shared.outputs.items():
                self._hold(name, ref, False)
        except BaseException:  # a later reference refused: the earlier ones are let go
            self.close()
            raise

    def _hold(self, tensor: str, ref: ShmRef, is_input: bool):
        kind = "input" if is_input else "output"
        region = self.memory.lookup(ref.region)
        if region is None:
            raise refused(
                tensor,
                "shm.region",
                f"{kind} {clip(tensor)!r}: no shared memory region is named {clip(ref.region)!r}",
                is_input,
            )
        if ref.offset + ref.byte_size > region.byte_size:
            raise refused(
                tensor,
                "shm.bounds",
                f"{kind} {clip(tensor)!r}: offset {ref.offset} + byte_size {ref.byte_size} is "
                f"past the end of region {clip(ref.region)!r} ({region.byte_size} bytes)",
                is_input,
            )
        region.in_use += 1
        self.held.append(region)
        return region

    def _check_intact(self, region) -> None:
        """region.check_intact() once per region per request: for a system region it is an
        fstat, which an input and an output in one region would otherwise each pay."""
        if id(region) not in self.intact:
            region.check_intact()
            self.intact.add(id(region))

    def close(self) -> None:
        for region in self.held:
            region.in_use -= 1
        self.held = []

    def input(self, name: str, datatype: str, shape, wire: tuple) -> Tensor:
        ref = ShmRef(*wire)
        region = self.memory.lookup(ref.region)
        entry = BY_DATATYPE.get(datatype)
        if entry is None:
            raise refused(name, "input.datatype", f"input {clip(name)!r}: unknown datatype")
        expected = nbytes(datatype, shape)
        if ref.byte_size != expected:
            raise refused(
                name,
                "shm.size",
                f"input {clip(name)!r}: shared_memory_byte_size {ref.byte_size} in region "
                f"{clip(ref.region)!r} does not match its shape {list(shape)} of {datatype} "
                f"({expected} bytes)",
            )
        self._check_intact(region)
        if region.kind == "cuda":
            return Tensor(
                name,
                datatype,
                DeviceArray(
                    region.address + ref.offset,
                    tuple(shape),
                    np.dtype(entry.carrier),
                    region.device_id,
                    lambda: self.memory.count_copy("cuda", "to_host"),
                ),
            )
        data = region.window(ref.offset, expected)
        in_place = data.ctypes.data % ALIGNMENT == 0
        if not in_place:
            data = _aligned_empty(expected)
            data[...] = region.window(ref.offset, expected)
            self.memory.count_copy("system", "misaligned")
        array = data.view(entry.carrier).reshape(tuple(shape))
        if datatype == "BOOL" and bool((data > 1).any()):
            array = (data != 0).reshape(tuple(shape))  # any non-zero byte is true, stored as 1
        elif in_place:
            self.memory.count_bound("system")  # a view of the client's bytes, no copy
        return Tensor(name, datatype, array)

    def destinations(self, names: list[str | None], most_bytes: list) -> list | None:
        """Per output of the method (its name, None if not asked for, and the most bytes it
        can take), the window of its region for the native host to write it into, else None;
        None when there is none at all. A window smaller than the output may be is not given:
        the output comes back to write_outputs, which refuses it by its real size. A system
        window is given only on a 256-byte boundary (as the arena's output room), so the host
        writes the output there itself and the engine's thread copies nothing."""
        found = None
        for index, name in enumerate(names):
            ref = self.shared.outputs.get(name)
            region = self.memory.lookup(ref.region) if ref is not None else None
            if region is None or ref.byte_size < most_bytes[index]:
                continue
            if region.kind == "cuda":
                window = DeviceArray(
                    region.address + ref.offset,
                    (ref.byte_size,),
                    np.dtype(np.uint8),
                    region.device_id,
                )
            elif (region.address + ref.offset) % ALIGNMENT == 0:
                window = region.window(ref.offset, ref.byte_size)
            else:
                continue
            self._check_intact(region)
            found = found or [None] * len(names)
            found[index] = window
        return found

    def write_outputs(self, outputs: list[Tensor]) -> set[str]:
        """Writes the outputs requested into regions; returns their names."""
        written = set()
        for tensor in outputs:
            ref = self.shared.outputs.get(tensor.name)
            if ref is None:
                continue
            if not isinstance(tensor.array, np.ndarray):  # the host wrote it there (destinations)
                if self.memory.lookup(ref.region).kind == "system":
                    self.memory.count_bound("system")
                written.add(tensor.name)
                continue
            array = np.ascontiguousarray(tensor.array)
            if array.nbytes > ref.byte_size:
                raise outgrown(tensor.name, ref, array.nbytes)
            region = self.memory.lookup(ref.region)
            region.check_intact()
            if region.kind == "cuda":
                cuda.copy(
                    region.address + ref.offset, array.ctypes.data, array.nbytes, region.device_id
                )
                self.memory.count_copy("cuda", "from_host")
            else:
                region.window(ref.offset, array.nbytes)[...] = array.reshape(-1).view(np.uint8)
            written.add(tensor.name)
        return written
