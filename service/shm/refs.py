"""What a request says about shared memory, as the fronts parse it from either protocol.

An input or output may carry the parameters `shared_memory_region`, `shared_memory_byte_size`
and `shared_memory_offset` (tritonclient's set_shared_memory); such an input has no data in the
request, and such an output none in the answer. These records travel to the engine with the
request (they are small and picklable); the bytes never do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from service.dtypes import BY_DATATYPE
from service.errors import Invalid, Problem, clip

REGION = "shared_memory_region"
BYTE_SIZE = "shared_memory_byte_size"
OFFSET = "shared_memory_offset"
KEYS = (REGION, BYTE_SIZE, OFFSET)


@dataclass(frozen=True)
class ShmRef:
    """Where one tensor lies: `byte_size` bytes at `offset` into the registered region."""

    region: str
    byte_size: int
    offset: int = 0


@dataclass
class SharedTensors:
    """The request's tensors in shared memory, by tensor name."""

    inputs: dict[str, ShmRef] = field(default_factory=dict)
    outputs: dict[str, ShmRef] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.inputs or self.outputs)


def refused(label: str, rule: str, message: str, is_input: bool = True) -> Invalid:
    return Invalid(message, [Problem(None, rule, message, input=label if is_input else None)])


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parse(name: str, parameters: dict, kind: str = "input") -> ShmRef | None:
    """The reference in a tensor's parameters, or None when it names no region; `kind` is
    "input" or "output", for the messages."""
    if not any(key in parameters for key in KEYS):
        return None
    label = f"{kind} {clip(name)!r}"
    is_input = kind == "input"
    region = parameters.get(REGION)
    if not isinstance(region, str) or not region:
        raise refused(name, "shm.parameter", f"{label}: {REGION!r} must name a region", is_input)
    size = parameters.get(BYTE_SIZE)
    offset = parameters.get(OFFSET, 0)
    for key, value in ((BYTE_SIZE, size), (OFFSET, offset)):
        if not _integer(value):
            raise refused(
                name,
                "shm.parameter",
                f"{label}: {key!r} for region {clip(region)!r} must be a non-negative integer, "
                f"got {clip(value)!r}",
                is_input,
            )
    return ShmRef(region, size, offset)


_ZERO = bytes(16)  # one element of any carrier dtype


def placeholder(datatype: str, shape) -> np.ndarray:
    """An array of the tensor's dtype and shape that owns no memory (all strides zero, over
    one read-only zero element): what the front checks against the signature for an input
    whose bytes stay in shared memory. Made directly, not with np.broadcast_to, which costs
    the front several times as much per request."""
    dims = tuple(int(d) for d in shape)
    return np.ndarray(dims, BY_DATATYPE[datatype].carrier, _ZERO, 0, (0,) * len(dims))


def nbytes(datatype: str, shape) -> int:
    count = 1
    for dim in shape:
        count *= int(dim)
    return count * BY_DATATYPE[datatype].carrier.itemsize


def to_wire(shared: SharedTensors) -> tuple:
    """Plain tuples for the engine's control messages (marshal carries no dataclasses)."""
    return tuple(
        tuple((name, ref.region, ref.byte_size, ref.offset) for name, ref in refs.items())
        for refs in (shared.inputs, shared.outputs)
    )


def from_wire(wire: tuple) -> SharedTensors:
    inputs, outputs = (
        {name: ShmRef(region, size, offset) for name, region, size, offset in refs} for refs in wire
    )
    return SharedTensors(inputs, outputs)


def answer_parameters(ref: ShmRef, tensor) -> dict:
    """An output's parameters in the answer when it was written into a region: where, and how
    many bytes it took."""
    answer = {REGION: ref.region, BYTE_SIZE: nbytes(tensor.datatype, tensor.array.shape)}
    if ref.offset:
        answer[OFFSET] = ref.offset
    return answer
