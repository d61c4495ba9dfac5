"""Real ExecuTorch CPU programs exported from small torch modules, for tests of every layer.

Each `export_*` function writes its files into a folder of its own under `out_dir` and returns an
`ExportedProgram` whose `module` is the eager reference to compare outputs against. A function
called twice with the same folder re-uses the files it wrote (exports cost seconds on 2 cores), so
session fixtures and child processes can share them.

torch and executorch.exir are imported lazily: the host itself never needs them, and tests that
only read already-exported files should not pay for the import.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ExportedProgram:
    pte: Path
    ptds: list[Path]
    module: object  # torch.nn.Module; eager reference for the "forward" method
    example_inputs: tuple
    # Extra methods (name -> (module, example inputs)) for multi-method programs.
    methods: dict = field(default_factory=dict)

    @property
    def data_paths(self) -> list[str]:
        return [str(p) for p in self.ptds]


def _modules():
    import torch

    class LinearRelu(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 3)

        def forward(self, x):
            return torch.relu(self.linear(x))

    class MixOfOps(torch.nn.Module):
        """Several kernels, an int64 input and two outputs, so dtype and output handling are
        real."""

        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 8)
            self.linear = torch.nn.Linear(8, 8)

        def forward(self, x, idx):
            e = self.embed(idx)
            h = torch.sigmoid(self.linear(x + e)) * 2.0 - x
            s = torch.softmax(h, dim=-1)
            return torch.cat([s, torch.tanh(h)], dim=0), h.mean(dim=1, keepdim=True)

    class TwoLayers(torch.nn.Module):
        """Two weight tensors, so they can be placed in two different data files."""

        def __init__(self):
            super().__init__()
            self.first = torch.nn.Linear(6, 5)
            self.second = torch.nn.Linear(5, 2)

        def forward(self, x):
            return self.second(torch.relu(self.first(x)))

    class Scale(torch.nn.Module):
        def __init__(self, factor):
            super().__init__()
            self.factor = factor

        def forward(self, x):
            return x * self.factor + 1.0

    class Heavy(torch.nn.Module):
        """Long chain of elementwise kernels: single-threaded CPU work of a tunable length."""

        def __init__(self, rounds):
            super().__init__()
            self.rounds = rounds

        def forward(self, x):
            for _ in range(self.rounds):
                x = torch.sin(x) * 0.5 + torch.cos(x) * 0.5
            return x

    class SameDtype(torch.nn.Module):
        """Returns its input's dtype: x + x for numbers, not x for BOOL."""

        def forward(self, x):
            return torch.logical_not(x) if x.dtype == torch.bool else x + x

    class EveryDatatype(torch.nn.Module):
        """One input and one output per datatype the host serves, output i computed from input i."""

        def forward(self, f32, f16, f64, i8, i16, i32, i64, u8, flags):
            return (
                f32 * 2.0,
                f16 + 1.0,
                f64 - 1.0,
                i8 + 1,
                i16 * 2,
                i32 + 3,
                i64 * 2,
                u8 + 1,
                torch.logical_not(flags),
            )

    return LinearRelu, MixOfOps, TwoLayers, Scale, Heavy, SameDtype, EveryDatatype


def _lower(method_programs: dict, config_kwargs: dict):
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    partitioner = []
    if config_kwargs.pop("xnnpack", False):
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        partitioner = [XnnpackPartitioner()]
    edge = to_edge_transform_and_lower(method_programs, partitioner=partitioner)
    return edge.to_executorch(ExecutorchBackendConfig(**config_kwargs))


def exported_files(folder: Path) -> ExportedProgram | None:
    """The program an `export_*` function wrote into `folder` earlier (None if it has not), read
    without torch or the exporter: a host whose torch cannot run executorch's exporter (the GPU
    machine) runs programs exported here and carried there. No eager module comes with it."""
    marker = Path(folder) / "files.json"
    if not marker.exists():
        return None
    names = json.loads(marker.read_text())
    return ExportedProgram(
        Path(folder) / "program.pte", [Path(folder) / n for n in names], None, ()
    )


def _export(
    folder: Path,
    methods: dict,
    config_kwargs: dict | None = None,
    dynamic_shapes: dict | None = None,
) -> tuple[Path, list[Path]]:
    """methods: name -> (module, example_inputs). Writes program.pte (+ .ptd files) once."""
    written = exported_files(folder)
    if written is not None:
        return written.pte, written.ptds
    import torch

    pte = folder / "program.pte"
    marker = folder / "files.json"
    folder.mkdir(parents=True, exist_ok=True)
    exported = {
        name: torch.export.export(
            module.eval(), inputs, dynamic_shapes=(dynamic_shapes or {}).get(name), strict=True
        )
        for name, (module, inputs) in methods.items()
    }
    config_kwargs = dict(config_kwargs or {})
    if config_kwargs.pop("fold_constants", False):
        # Decomposed first, so that what ExecuTorch's lowering would compute from constants
        # (nn.Linear's permute_copy of its weight) is there to be folded into new constants.
        from executorch.exir.passes.constant_prop_pass import constant_prop_pass

        exported = {
            name: constant_prop_pass(ep.run_decompositions()) for name, ep in exported.items()
        }
    alignment = config_kwargs.pop("memory_planning_alignment", None)
    unplanned_inputs = config_kwargs.pop("unplanned_inputs", False)
    unplanned_outputs = config_kwargs.pop("unplanned_outputs", False)
    if alignment is not None or unplanned_inputs or unplanned_outputs:
        # Imported only when exporting: reading cached files must work without the exporter.
        from executorch.exir.passes import MemoryPlanningPass
        from executorch.exir.passes.memory_planning_pass import ALIGNMENT

        config_kwargs["memory_planning_pass"] = MemoryPlanningPass(
            alignment=alignment or ALIGNMENT,
            alloc_graph_input=not unplanned_inputs,
            alloc_graph_output=not unplanned_outputs,
        )
    program = _lower(exported, config_kwargs)
    program.save(str(pte))
    before = set(folder.glob("*.ptd"))
    if program._tensor_data:
        program.write_tensor_data_to_file(str(folder))
    ptds = sorted(set(folder.glob("*.ptd")) - before)
    # Written last: a half-exported folder (interrupted run) is exported again.
    marker.write_text(json.dumps([p.name for p in ptds]))
    return pte, ptds


def _seeded():
    import torch

    torch.manual_seed(0)
    return torch


def export_linear_relu(
    out_dir: Path,
    alignment: int | None = None,
    planned_inputs: bool = True,
    planned_outputs: bool = True,
) -> ExportedProgram:
    """alignment: planning alignment for memory-planned tensors (e.g. 256 for TensorRT
    placement); planned_inputs False leaves the input out of memory planning, so the host
    hands the method the caller's buffer itself; planned_outputs False the output, which the
    host then gives memory of its own (or the caller's destination)."""
    torch = _seeded()
    module = _modules()[0]()
    inputs = (torch.randn(2, 4),)
    config = {}
    folder = Path(out_dir) / "linear_relu"
    if alignment is not None:
        config["memory_planning_alignment"] = alignment
        folder = Path(out_dir) / f"linear_relu_align{alignment}"
    if not planned_inputs:
        config["unplanned_inputs"] = True
        folder = folder.with_name(folder.name + "_unplanned")
    if not planned_outputs:
        config["unplanned_outputs"] = True
        folder = folder.with_name(folder.name + "_unplanned_outputs")
    pte, ptds = _export(folder, {"forward": (module, inputs)}, config)
    return ExportedProgram(pte, ptds, module, inputs)


def export_mix_of_ops(out_dir: Path) -> ExportedProgram:
    torch = _seeded()
    module = _modules()[1]()
    inputs = (torch.randn(3, 8), torch.tensor([1, 4, 9], dtype=torch.int64))
    pte, ptds = _export(Path(out_dir) / "mix_of_ops", {"forward": (module, inputs)})
    return ExportedProgram(pte, ptds, module, inputs)


DYNAMIC_BATCH_MAX = 16


def export_dynamic_batch(out_dir: Path) -> ExportedProgram:
    """Batch dimension 0 of the input is dynamic, 1..DYNAMIC_BATCH_MAX."""
    torch = _seeded()
    module = _modules()[0]()
    inputs = (torch.randn(3, 4),)
    batch = torch.export.Dim("batch", min=1, max=DYNAMIC_BATCH_MAX)
    pte, ptds = _export(
        Path(out_dir) / "dynamic_batch",
        {"forward": (module, inputs)},
        dynamic_shapes={"forward": ({0: batch},)},
    )
    return ExportedProgram(pte, ptds, module, inputs)


DYNAMIC_WIDE_FEATURES = 32


def export_dynamic_wide(out_dir: Path, xnnpack: bool = False) -> ExportedProgram:
    """relu(Linear(32, 8)) on [batch, 32], batch dynamic (1..DYNAMIC_BATCH_MAX): the method's
    upper bound [16, 32] does not say which dimension varies, so [4, 16] passes the host's
    bound and only the kernels (or XNNPACK's graph, `xnnpack`) can refuse it."""
    torch = _seeded()
    module = torch.nn.Sequential(torch.nn.Linear(DYNAMIC_WIDE_FEATURES, 8), torch.nn.ReLU())
    inputs = (torch.randn(3, DYNAMIC_WIDE_FEATURES),)
    batch = torch.export.Dim("batch", min=1, max=DYNAMIC_BATCH_MAX)
    pte, ptds = _export(
        Path(out_dir) / ("dynamic_wide_xnnpack" if xnnpack else "dynamic_wide"),
        {"forward": (module, inputs)},
        {"xnnpack": xnnpack},
        dynamic_shapes={"forward": ({0: batch},)},
    )
    return ExportedProgram(pte, ptds, module, inputs)


def export_external_weights(out_dir: Path) -> ExportedProgram:
    """All weights in one .ptd (`_default_external_constant.ptd`)."""
    torch = _seeded()
    module = _modules()[2]()
    inputs = (torch.randn(2, 6),)
    pte, ptds = _export(
        Path(out_dir) / "external_weights",
        {"forward": (module, inputs)},
        {"external_constants": True},
    )
    return ExportedProgram(pte, ptds, module, inputs)


LARGE_WEIGHTS_WIDTH = 4096  # one [4096, 4096] FP32 weight: 64 MiB


def export_large_weights(out_dir: Path, fold_constants: bool) -> ExportedProgram:
    """nn.Linear(4096, 4096) with its 64 MiB of weights in `_default_external_constant.ptd`.

    ExecuTorch lowers nn.Linear to permute_copy(weight) + addmm. Without fold_constants the
    transposed weight is a memory-planned tensor the program writes at every execute, so the
    weight is resident twice (mapped from the .ptd, copied in the arena). With it, constant
    propagation stores the weight transposed in the .ptd and the kernel reads it where it is
    mapped."""
    torch = _seeded()
    module = torch.nn.Linear(LARGE_WEIGHTS_WIDTH, LARGE_WEIGHTS_WIDTH)
    inputs = (torch.randn(1, LARGE_WEIGHTS_WIDTH),)
    pte, ptds = _export(
        Path(out_dir) / ("large_weights_folded" if fold_constants else "large_weights"),
        {"forward": (module, inputs)},
        {"external_constants": True, "fold_constants": fold_constants},
    )
    return ExportedProgram(pte, ptds, module, inputs)


def _by_layer(node) -> str | None:
    """Tags each constant by its layer, so the two layers land in two data files."""
    if "first" in node.name:
        return "first_layer"
    if "second" in node.name:
        return "second_layer"
    return None


def export_split_weights(out_dir: Path) -> ExportedProgram:
    """Weights split over two .ptd files: first_layer.ptd and second_layer.ptd."""
    torch = _seeded()
    module = _modules()[2]()
    inputs = (torch.randn(2, 6),)
    pte, ptds = _export(
        Path(out_dir) / "split_weights",
        {"forward": (module, inputs)},
        {"external_constants": _by_layer},
    )
    return ExportedProgram(pte, ptds, module, inputs)


def export_two_methods(out_dir: Path) -> ExportedProgram:
    """Methods "forward" (x * 2 + 1) and "triple" (x * 3 + 1)."""
    torch = _seeded()
    Scale = _modules()[3]
    inputs = (torch.randn(2, 3),)
    forward, triple = Scale(2.0), Scale(3.0)
    pte, ptds = _export(
        Path(out_dir) / "two_methods",
        {"forward": (forward, inputs), "triple": (triple, inputs)},
    )
    return ExportedProgram(pte, ptds, forward, inputs, methods={"triple": (triple, inputs)})


def export_cpu_heavy(out_dir: Path, rounds: int = 200, size: int = 200_000) -> ExportedProgram:
    """Hundreds of milliseconds of kernel work per execute with the defaults. ExecuTorch's
    optimized kernels spread elementwise ops over its own thread pool from some tensor size on;
    pass a small `size` (e.g. 16384) for single-threaded work, as thread-scaling figures need."""
    torch = _seeded()
    module = _modules()[4](rounds)
    inputs = (torch.randn(size),)
    pte, ptds = _export(Path(out_dir) / f"cpu_heavy_{rounds}_{size}", {"forward": (module, inputs)})
    return ExportedProgram(pte, ptds, module, inputs)


def _batching_modules():
    import torch

    class WeightBound(torch.nn.Module):
        """Layers of Linear(width, width): at small batches the time goes to reading the
        weights, the case where merging requests into one execute pays most. Written as
        x @ W + b because nn.Linear lowers to ExecuTorch's portable addmm, a naive loop that is
        compute-bound at any batch size, while mm runs the optimized (BLAS) kernel."""

        def __init__(self, width, layers):
            super().__init__()
            scale = width**-0.5
            self.weights = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.randn(width, width) * scale) for _ in range(layers)]
            )
            self.biases = torch.nn.ParameterList(
                [torch.nn.Parameter(torch.randn(width) * scale) for _ in range(layers)]
            )

        def forward(self, x):
            for weight, bias in zip(self.weights, self.biases):
                x = torch.mm(x, weight) + bias
            return x

    class Lookup(torch.nn.Module):
        """Token ids [batch, tokens] -> [batch, tokens, 8]; an id past the table fails the
        execute (the kernel checks it), so a bad request can fail the batch it is in."""

        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 8)
            self.linear = torch.nn.Linear(8, 8)

        def forward(self, ids):
            return torch.tanh(self.linear(self.embed(ids)))

    return WeightBound, Lookup


WEIGHT_BOUND_MAX_BATCH = 64


def export_weight_bound(out_dir: Path, width: int = 1024, layers: int = 4) -> ExportedProgram:
    """`layers` x Linear(width, width) with a dynamic batch dim 0 (1..WEIGHT_BOUND_MAX_BATCH)."""
    torch = _seeded()
    module = _batching_modules()[0](width, layers)
    inputs = (torch.randn(2, width),)
    batch = torch.export.Dim("batch", min=1, max=WEIGHT_BOUND_MAX_BATCH)
    pte, ptds = _export(
        Path(out_dir) / f"weight_bound_{width}_{layers}",
        {"forward": (module, inputs)},
        dynamic_shapes={"forward": ({0: batch},)},
    )
    return ExportedProgram(pte, ptds, module, inputs)


LOOKUP_MAX_BATCH, LOOKUP_MAX_TOKENS, LOOKUP_TABLE = 16, 8, 10


def export_dynamic_lookup(out_dir: Path) -> ExportedProgram:
    """int64 ids [batch, tokens], both dims dynamic (1..16, 1..8); ids must be below 10."""
    torch = _seeded()
    module = _batching_modules()[1]()
    inputs = (torch.randint(0, LOOKUP_TABLE, (2, 3)),)
    batch = torch.export.Dim("batch", min=1, max=LOOKUP_MAX_BATCH)
    tokens = torch.export.Dim("tokens", min=1, max=LOOKUP_MAX_TOKENS)
    pte, ptds = _export(
        Path(out_dir) / "dynamic_lookup",
        {"forward": (module, inputs)},
        dynamic_shapes={"forward": ({0: batch, 1: tokens},)},
    )
    return ExportedProgram(pte, ptds, module, inputs)


# Datatypes of export_every_datatype's inputs and outputs, in order (Open Inference Protocol names).
EVERY_DATATYPE = ("FP32", "FP16", "FP64", "INT8", "INT16", "INT32", "INT64", "UINT8", "BOOL")


def export_every_datatype(out_dir: Path) -> ExportedProgram:
    """Inputs of shape [2, 3] in the datatypes of EVERY_DATATYPE; output i is f(input i)."""
    torch = _seeded()
    module = _modules()[6]()
    dtypes = (
        torch.float32,
        torch.float16,
        torch.float64,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
    )
    inputs = tuple((torch.randn(2, 3) * 10).to(dtype) for dtype in dtypes) + (
        torch.tensor([[True, False, True], [False, False, True]]),
    )
    pte, ptds = _export(Path(out_dir) / "every_datatype", {"forward": (module, inputs)})
    return ExportedProgram(pte, ptds, module, inputs)


# Open Inference Protocol datatypes numpy holds as they are, with their torch dtypes. BF16 is served
# too, but numpy has no bfloat16: it crosses the host as uint16 bit patterns (see service.dtypes).
HOST_DATATYPES = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
}
_TORCH_DTYPES = {**HOST_DATATYPES, "BF16": "bfloat16"}


def export_same_dtype(out_dir: Path, datatype: str) -> ExportedProgram:
    """One input and one output of `datatype`, shape [2, 3]."""
    torch = _seeded()
    module = _modules()[5]()
    dtype = getattr(torch, _TORCH_DTYPES[datatype])
    if dtype == torch.bool:
        example = torch.rand(2, 3) > 0.5
    elif dtype.is_floating_point:
        example = torch.randn(2, 3).to(dtype)
    else:
        example = torch.randint(0, 50, (2, 3)).to(dtype)
    pte, ptds = _export(
        Path(out_dir) / f"same_dtype_{datatype.lower()}", {"forward": (module, (example,))}
    )
    return ExportedProgram(pte, ptds, module, (example,))


LARGE_INPUT_ELEMENTS = 25 * 1024 * 1024  # 100 MiB of FP32


def export_large_input(out_dir: Path) -> ExportedProgram:
    """x * 2 + 1 on a [LARGE_INPUT_ELEMENTS] FP32 input: requests of 100 MiB each way."""
    torch = _seeded()
    module = _modules()[3](2.0)
    inputs = (torch.zeros(LARGE_INPUT_ELEMENTS),)
    pte, ptds = _export(Path(out_dir) / "large_input", {"forward": (module, inputs)})
    return ExportedProgram(pte, ptds, module, inputs)


def export_image(out_dir: Path, xnnpack: bool = False) -> ExportedProgram:
    """x * 2 + 1 on a 1x3x224x224 FP32 input: an image-sized request with little compute. On
    ExecuTorch's portable kernels that little still takes a millisecond or two per execute;
    lowered to XNNPACK (`xnnpack`), tens of microseconds: what is left is moving the bytes."""
    torch = _seeded()
    module = _modules()[3](2.0)
    inputs = (torch.randn(1, 3, 224, 224),)
    folder = Path(out_dir) / ("image_xnnpack" if xnnpack else "image")
    pte, ptds = _export(folder, {"forward": (module, inputs)}, {"xnnpack": xnnpack})
    return ExportedProgram(pte, ptds, module, inputs)


COUNTER_MAX_BATCH, COUNTER_TABLE = 8, 4


def _counter_module(width: int):
    import torch

    class Counter(torch.nn.Module):
        """Counts the rows it executes in a mutable buffer, before a lookup that fails for an
        index past its table: a failed execute still counts, as a program's state would change
        (a KV cache written before a later kernel fails). Outputs the lookup and, per row, the
        count after this execute."""

        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(1, dtype=torch.int64))
            self.register_buffer("first", torch.zeros(1, dtype=torch.int64), persistent=False)
            self.table = torch.nn.Embedding(COUNTER_TABLE, width)

        def forward(self, idx):
            rows = torch.ones_like(idx).sum(0, keepdim=True)
            self.count.index_put_((self.first,), self.count + rows)
            return self.table(idx), self.count + torch.zeros_like(idx)

    return Counter()


def export_counter(out_dir: Path, width: int = 2) -> ExportedProgram:
    """Int64 ids [batch] (1..COUNTER_MAX_BATCH) -> (their rows of a [COUNTER_TABLE, width] table,
    the count of rows executed so far per row). The count lives in a mutable buffer updated in
    place (run_reinplace_pass) before the lookup, so an id past the table fails the execute
    after it counted. The buffer starts as whatever its planned memory held: compare counts,
    not values."""
    torch = _seeded()
    module = _counter_module(width)
    inputs = (torch.tensor([1, 2]),)
    batch = torch.export.Dim("batch", min=1, max=COUNTER_MAX_BATCH)
    pte, ptds = _export(
        Path(out_dir) / f"counter_{width}",
        {"forward": (module, inputs)},
        {"run_reinplace_pass": True},
        dynamic_shapes={"forward": ({0: batch},)},
    )
    return ExportedProgram(pte, ptds, module, inputs)


def export_slow(out_dir: Path, width: int = 512, rounds: int = 6) -> ExportedProgram:
    """A slow execute from a small input ([1, width] FP32, well within what the fronts' native
    path takes) and a small graph that exports in seconds: `rounds` products of width x width
    matrices. For tests that need requests to queue behind one another (cancellation)."""
    torch = _seeded()

    class Slow(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(width, width) / width**0.5)

        def forward(self, x):
            y = x.expand(width, width) + self.w
            for _ in range(rounds):
                y = torch.tanh(y @ self.w)
            return y.sum(0, keepdim=True)

    return export_module(out_dir, f"slow_{width}_{rounds}", Slow(), (torch.randn(1, width),))


def export_module(out_dir: Path, key: str, module, inputs: tuple) -> ExportedProgram:
    """Any torch module as a one-method ("forward") program in the folder `out_dir/key`; `key`
    must change whenever the module or the input shapes do (the files are re-used)."""
    _seeded()
    pte, ptds = _export(Path(out_dir) / key, {"forward": (module, inputs)})
    return ExportedProgram(pte, ptds, module, inputs)


EXPORTERS: dict[str, Callable[[Path], ExportedProgram]] = {
    "linear_relu": export_linear_relu,
    "mix_of_ops": export_mix_of_ops,
    "dynamic_batch": export_dynamic_batch,
    "weight_bound": export_weight_bound,
    "dynamic_lookup": export_dynamic_lookup,
    "external_weights": export_external_weights,
    "split_weights": export_split_weights,
    "two_methods": export_two_methods,
    "cpu_heavy": export_cpu_heavy,
    "every_datatype": export_every_datatype,
    "image": export_image,
    "counter": export_counter,
}
