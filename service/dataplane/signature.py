"""Method signatures with stable tensor names, and request tensors checked against them.

Tensors are named by service.tensor_names (`input_<i>` / `output_<i>`).
"""

from __future__ import annotations

from service import rules
from service.dataplane.types import MethodSignature, Tensor, TensorSpec
from service.dtypes import datatype_of
from service.errors import Invalid, Problem, clip, input_problem
from service.tensor_names import tensor_names


def _spec(name: str, spec: dict) -> TensorSpec:
    return TensorSpec(
        name=name,
        datatype=datatype_of(spec.get("dtype", "")),
        shape=list(spec.get("shape", [])),
        dynamic=bool(spec.get("dynamic")),
        tag=spec.get("tag", "Tensor"),
    )


def signature_of(meta: dict) -> MethodSignature:
    """From the native host's method meta (or its file-read equivalent)."""
    inputs, outputs = meta.get("inputs", []), meta.get("outputs", [])
    return MethodSignature(
        meta["name"],
        [_spec(n, s) for n, s in zip(tensor_names(inputs, "input"), inputs)],
        [_spec(n, s) for n, s in zip(tensor_names(outputs, "output"), outputs)],
    )


def _published_tensor(spec: TensorSpec, tensor: dict) -> dict:
    rest = {k: v for k, v in tensor.items() if k not in ("name", "dtype")}
    return {"name": spec.name, "datatype": spec.datatype or "UNSUPPORTED", **rest}


def published_method(meta: dict) -> dict:
    """A stored method description with each tensor named and typed as requests name them
    (`input_0`, `FP32`), not as the program and host spell them (`input 0`, `float32`): the
    description is where clients look up what to send."""
    signature = signature_of(meta)
    return {
        **meta,
        "inputs": [_published_tensor(s, t) for s, t in zip(signature.inputs, meta["inputs"])],
        "outputs": [_published_tensor(s, t) for s, t in zip(signature.outputs, meta["outputs"])],
    }


def _label(index: int, tensor: Tensor) -> str:
    return clip(tensor.name) if tensor.name is not None else f"input_{index}"


def _order(tensors: list[Tensor], signature: MethodSignature) -> list[tuple[TensorSpec, Tensor]]:
    """Pairs each method input with its request tensor: by name when named, else by position."""
    specs = signature.inputs
    if len(tensors) != len(specs):
        raise input_problem(
            None,
            rules.INPUT_COUNT,
            f"method {signature.name!r} takes {len(specs)} input(s) "
            f"({', '.join(signature.input_names())}), the request has "
            f"{len(tensors)}",
        )
    if all(t.name is None for t in tensors):
        return list(zip(specs, tensors))
    by_name = {spec.name: spec for spec in specs}
    paired, seen = [], set()
    for index, tensor in enumerate(tensors):
        if tensor.name is None:
            raise input_problem(
                _label(index, tensor),
                rules.INPUT_NAME,
                f"input {index} has no name; name every input or none",
            )
        spec = by_name.get(tensor.name)
        if spec is None:
            raise input_problem(
                _label(index, tensor),
                rules.INPUT_UNKNOWN,
                f"unknown input {clip(tensor.name)!r}; method {signature.name!r} "
                f"takes {', '.join(signature.input_names())}",
            )
        if spec.name in seen:
            raise input_problem(
                _label(index, tensor),
                rules.INPUT_DUPLICATE,
                f"input {spec.name!r} is given more than once",
            )
        seen.add(spec.name)
        paired.append((spec, tensor))
    order = {spec.name: i for i, spec in enumerate(specs)}
    return sorted(paired, key=lambda pair: order[pair[0].name])


def bind_inputs(tensors: list[Tensor], signature: MethodSignature) -> list:
    """The request's arrays in the method's input order, each checked against its spec."""
    arrays = []
    for spec, tensor in _order(tensors, signature):
        label = f"input {spec.name!r}"
        if spec.tag != "Tensor":
            raise input_problem(
                spec.name,
                rules.INPUT_UNSUPPORTED,
                f"{label} is a {spec.tag} input; only tensor inputs are served",
            )
        if tensor.datatype != spec.datatype:
            raise input_problem(
                spec.name,
                rules.INPUT_DATATYPE,
                f"{label} must be {spec.datatype}, the request sends {clip(tensor.datatype)}",
            )
        shape = list(tensor.array.shape)
        if len(shape) != len(spec.shape):
            raise input_problem(
                spec.name,
                rules.INPUT_SHAPE,
                f"{label} must have {len(spec.shape)} dimension(s) {spec.shape}, got {shape}",
            )
        if spec.dynamic:
            if any(d > b for d, b in zip(shape, spec.shape)):
                raise input_problem(
                    spec.name,
                    rules.INPUT_SHAPE,
                    f"{label} shape {shape} exceeds the upper bound {spec.shape}",
                )
        elif shape != spec.shape:
            raise input_problem(
                spec.name, rules.INPUT_SHAPE, f"{label} must have shape {spec.shape}, got {shape}"
            )
        arrays.append(tensor.array)
    return arrays


def select_outputs(signature: MethodSignature, requested: list[str] | None) -> list[int]:
    """Indices of the outputs to return, in the order asked for."""
    names = signature.output_names()
    if requested is None:
        return list(range(len(names)))
    indices = []
    for name in requested:
        if name not in names:
            raise Invalid(
                f"unknown output {clip(name)!r}; method {signature.name!r} has {', '.join(names)}",
                [Problem(None, rules.OUTPUT_UNKNOWN, f"unknown output {clip(name)!r}")],
            )
        indices.append(names.index(name))
    return indices
