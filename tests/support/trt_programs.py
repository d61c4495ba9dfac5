"""Real .pte programs delegated to TensorRTBackend, exported on a CPU without TensorRT.

A BackendDetails subclass named TensorRTBackend (ExecuTorch finds backends by class name)
turns each delegated op into a TR01 blob around a plan for the test engine provider, so the
native backend can run these programs end to end with that provider standing in for TensorRT.
The engine sits inline in the blob or, with external=True, in a .ptd under
sha256(engine) + "_trt_engine", as Torch-TensorRT stores it.

With device_planned=True the delegate carries ExecuTorch's `target_device` compile spec
(b"cuda:0"), so memory planning puts the method's inputs and outputs in a CUDA buffer; the
method's own inputs/outputs are those device tensors (ExecuTorch inserts no copies of its own),
and the host copies request inputs in and results out.

With in_graph_copies=True the delegate targets cuda:0 too, but the program keeps ExecuTorch
1.5's default device propagation: inputs and outputs stay in host memory and in-graph
et_copy::_h2d_copy / _d2h_copy ops move the delegate's tensors, through the CUDA
DeviceAllocator registered with ExecuTorch (runtime_ext/common/executorch_allocator.h).

Run as `python -m support.trt_programs OUT_DIR` (from tests/) to export the set the GPU tests
use on a machine whose torch cannot run executorch.exir.
"""

import hashlib
import re
import shutil
import sys
from pathlib import Path

import torch
from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
from executorch.exir._serialize._named_data_store import NamedDataStore
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.passes import MemoryPlanningPass
from executorch.exir.passes.propagate_device_config import PropagateDeviceConfig

from support.trt_blob import io, make_blob, metadata, plan_bytes
from support.trt_models import (
    CPU_PROGRAMS,
    DEVICE_PLANNED_SET,
    FAULT_SET,
    GPU_SET,
    IN_GRAPH_COPIES_SET,
    SPIN_SET,
    UNPLANNED_INPUTS_SET,
    UNPLANNED_OUTPUTS_SET,
    TrtProgram,
    fault_program,
    program_name,
)

# Edge op name -> test provider op.
OPS = {"aten.add.Tensor": "add", "aten.mm.default": "matmul"}
EXTERNAL_TAG_SPEC = "external_tag"
# ExecuTorch's key for a delegate's device (exir/passes/propagate_device_pass.py).
TARGET_DEVICE_SPEC = "target_device"
# The range of dimension 0 in a dynamic program (torch.export takes 2 as the least a dynamic
# dimension can be: 0 and 1 are specialized).
DYNAMIC_ROWS = (2, 8)
# Models whose dimension 0 ranges otherwise (a batch of 1 to 32 rows). The lowered program's
# range starts at 2 whatever the export said, so the least rows reach the plan's profile through
# a compile spec.
ROWS_OF = {"spin_add": (1, 32)}
ROWS_MIN_SPEC = "rows_min"


def _op_name(node):
    """'aten.add.Tensor' for an edge op node (its str is
    '<EdgeOpOverload: aten.add.Tensor>: ...')."""
    if node.op != "call_function":
        return None
    found = re.match(r"<EdgeOpOverload: ([\w.]+)>", str(node.target))
    return found.group(1) if found else str(node.target)


def _dtype_name(val):
    return str(val.dtype).replace("torch.", "")


def _io(name, is_input, val, ranges, rows_min=None) -> dict:
    """A plan binding; a dynamic dimension is -1, with the exported range as the input's
    profile, as a TensorRT engine built from a dynamic export has one optimization profile."""
    if all(isinstance(d, int) for d in val.shape):
        return io(name, is_input, val.shape, _dtype_name(val))
    bounds = [
        (d, d)
        if isinstance(d, int)
        else (int(ranges[d.node.expr].lower), int(ranges[d.node.expr].upper))
        for d in val.shape
    ]
    shape = [d if isinstance(d, int) else -1 for d in val.shape]
    lows, highs = [low for low, _ in bounds], [high for _, high in bounds]
    if rows_min is not None and shape[0] == -1:
        lows[0] = rows_min
    return io(
        name,
        is_input,
        shape,
        _dtype_name(val),
        lows if is_input else None,
        highs if is_input else None,
    )


class TensorRTBackend(BackendDetails):
    """Test stand-in for Torch-TensorRT's backend: a one-op partition becomes a test plan."""

    @staticmethod
    def preprocess(edge_program, compile_specs):
        specs = {s.key: s.value for s in compile_specs}
        graph = edge_program.graph_module.graph
        inputs = [n for n in graph.nodes if n.op == "placeholder"]
        ops = [n for n in graph.nodes if n.op == "call_function"]
        outputs = list(next(n for n in graph.nodes if n.op == "output").args[0])
        assert len(ops) == 1 and _op_name(ops[0]) in OPS, f"test backend takes one op, got {ops}"
        ranges = edge_program.range_constraints
        least = int(specs[ROWS_MIN_SPEC]) if ROWS_MIN_SPEC in specs else None
        plan_io = [
            _io(f"input{i}", True, n.meta["val"], ranges, least) for i, n in enumerate(inputs)
        ]
        plan_io += [_io(f"output{i}", False, n.meta["val"], ranges) for i, n in enumerate(outputs)]
        plan = plan_bytes(OPS[_op_name(ops[0])], plan_io)
        bindings = [(t["name"], t["is_input"]) for t in plan_io]
        tag = specs.get(EXTERNAL_TAG_SPEC)
        if tag is None:
            return PreprocessResult(processed_bytes=make_blob(metadata(bindings), plan))
        key = hashlib.sha256(plan).hexdigest() + "_trt_engine"
        store = NamedDataStore()
        store.add_named_data(key, plan, alignment=16, external_tag=tag.decode())
        return PreprocessResult(
            processed_bytes=make_blob(metadata(bindings, engine_key=key)),
            data_store_output=store.get_named_data_store_output(),
        )


class TensorRTTestPartitioner(Partitioner):
    """Tags each add/mm node as its own TensorRTBackend partition; everything else stays on CPU."""

    def __init__(self, external_tag=None, target_device=None, rows_min=None):
        specs = [CompileSpec(EXTERNAL_TAG_SPEC, external_tag.encode())] if external_tag else []
        if target_device:
            specs.append(CompileSpec(TARGET_DEVICE_SPEC, target_device.encode()))
        if rows_min is not None:
            specs.append(CompileSpec(ROWS_MIN_SPEC, str(rows_min).encode()))
        self.delegation = DelegationSpec("TensorRTBackend", specs)

    def partition(self, exported_program):
        tags = {}
        for node in exported_program.graph_module.graph.nodes:
            if _op_name(node) in OPS:
                tag = f"trt_{len(tags)}"
                node.meta["delegation_tag"] = tag
                tags[tag] = self.delegation
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)


class AddModel(torch.nn.Module):
    def forward(self, x, y):
        return x + y


class MixedModel(torch.nn.Module):
    """Two delegates with a CPU op between them: relu(x + y) + x."""

    def forward(self, x, y):
        return torch.relu(x + y) + x


class MatmulModel(torch.nn.Module):
    def forward(self, a, b):
        return torch.mm(a, b)


TORCH_MODELS = {
    "add": AddModel,
    "image_add": AddModel,
    "spin_add": AddModel,
    "mixed": MixedModel,
    "matmul": MatmulModel,
}


def _device_planning(device_planned, in_graph_copies):
    """Config options for planning the delegate's tensors in its device memory: with
    device_planned, the method's inputs/outputs too (skipping ExecuTorch's own copies: the host
    copies requests in and results out); with in_graph_copies, only the delegate's side of
    ExecuTorch's copy ops (said explicitly rather than relying on 1.5's default)."""
    if in_graph_copies:
        return {"enable_non_cpu_memory_planning": True}
    if not device_planned:
        return {}
    return {
        "enable_non_cpu_memory_planning": True,
        "propagate_device_config": PropagateDeviceConfig(
            skip_h2d_for_method_inputs=True, skip_d2h_for_method_outputs=True
        ),
    }


def export_trt_program(
    out_dir,
    model="mixed",
    alignment=16,
    external=False,
    device_planned=False,
    in_graph_copies=False,
    planned_inputs=True,
    planned_outputs=True,
    dynamic=False,
) -> TrtProgram:
    """dynamic: dimension 0 of every input varies (ROWS_OF, else DYNAMIC_ROWS), the plan's
    bindings -1 there with that range as the engine's optimization profile."""
    if device_planned and in_graph_copies:
        raise ValueError("device_planned skips the copies that in_graph_copies asks for")
    out_dir = Path(out_dir)
    result = TrtProgram.at(
        out_dir,
        model,
        alignment,
        external,
        device_planned,
        in_graph_copies,
        planned_inputs,
        planned_outputs,
        dynamic,
    )
    if result.exists():
        return result
    tag = f"{program_name(model, alignment, external)}_engines" if external else None
    example = tuple(torch.from_numpy(x) for x in result.example_inputs())
    low, high = ROWS_OF.get(model, DYNAMIC_ROWS)
    rows = torch.export.Dim("rows", min=low, max=high)
    dynamic_shapes = tuple({0: rows} for _ in example) if dynamic else None
    ep = torch.export.export(TORCH_MODELS[model](), example, dynamic_shapes=dynamic_shapes)
    on_cuda = device_planned or in_graph_copies
    partitioner = TensorRTTestPartitioner(
        tag,
        target_device="cuda:0" if on_cuda else None,
        rows_min=low if dynamic and model in ROWS_OF else None,
    )
    lowered = to_edge_transform_and_lower(ep, partitioner=[partitioner])
    program = lowered.to_executorch(
        ExecutorchBackendConfig(
            memory_planning_pass=MemoryPlanningPass(
                alignment=alignment,
                alloc_graph_input=planned_inputs,
                alloc_graph_output=planned_outputs,
            ),
            **_device_planning(device_planned, in_graph_copies),
        )
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    result.pte.write_bytes(program.buffer)
    if external:
        program.write_tensor_data_to_file(str(out_dir))
    assert result.exists(), f"expected {result}"
    return result


def with_plans_rewritten(source, target, blob_fields=None, io_fields=None, **fields):
    """`source` with each inline test plan re-saved with `fields` added (e.g. stats=...), its
    I/O tensors with `io_fields` (name -> fields, e.g. {"input0": {"shape_tensor": True}}), and
    the blobs' metadata with `blob_fields` (e.g. target_platform=...).

    Rewritten through ExecuTorch's own serializer, so only the engines differ from a program
    the exporter wrote: what a user gets who re-exports the same model with other engine flags.
    """
    import json

    from executorch.exir._serialize._program import deserialize_pte_binary, serialize_pte_binary

    from support.trt_host import load_tensorrt_backend

    trt = load_tensorrt_backend()
    pte = deserialize_pte_binary(Path(source).read_bytes())
    for entry in pte.program.backend_delegate_data:
        blob = bytes(entry.data)
        meta = trt.parse_blob(blob)
        start = meta["engine_offset"]
        plan = json.loads(blob[start + len(b"TESTPLAN") : start + meta["engine_size"]])
        bindings = [(b["name"], b["is_input"]) for b in meta["io_bindings"]]
        plan_io = [{**t, **(io_fields or {}).get(t["name"], {})} for t in plan["io"]]
        entry.data = make_blob(
            metadata(bindings, **(blob_fields or {})), plan_bytes(plan["op"], plan_io, **fields)
        )
    Path(target).write_bytes(bytes(serialize_pte_binary(pte, extract_delegate_segments=True)))
    return Path(target)


def export_cpu_programs(out_dir) -> dict[str, Path]:
    """trt_models.CPU_PROGRAMS as single files in `out_dir` (where the GPU tests look for them)."""
    from support.programs import export_linear_relu

    exported = {
        "cpu_unplanned": export_linear_relu(out_dir, alignment=256, planned_inputs=False),
        "cpu_unplanned_io": export_linear_relu(
            out_dir, alignment=256, planned_inputs=False, planned_outputs=False
        ),
    }
    files = {}
    for key, program in exported.items():
        assert not program.ptds, f"{program.pte} keeps its weights in .ptd files"
        files[key] = Path(out_dir) / f"{CPU_PROGRAMS[key]}.pte"
        if program.pte != files[key]:
            shutil.copyfile(program.pte, files[key])
    return files


if __name__ == "__main__":
    for path in export_cpu_programs(sys.argv[1]).values():
        print(path)
    for model, alignment, external in GPU_SET:
        print(export_trt_program(sys.argv[1], model, alignment, external).pte)
    for model, alignment in DEVICE_PLANNED_SET:
        print(export_trt_program(sys.argv[1], model, alignment, device_planned=True).pte)
    for model, alignment in IN_GRAPH_COPIES_SET:
        print(export_trt_program(sys.argv[1], model, alignment, in_graph_copies=True).pte)
    for model, alignment in UNPLANNED_INPUTS_SET:
        print(export_trt_program(sys.argv[1], model, alignment, planned_inputs=False).pte)
    for model, alignment in UNPLANNED_OUTPUTS_SET:
        program = export_trt_program(
            sys.argv[1], model, alignment, planned_inputs=False, planned_outputs=False
        )
        print(program.pte)
    mixed = export_trt_program(sys.argv[1], "mixed", 256).pte
    for name, fields in FAULT_SET.items():
        print(with_plans_rewritten(mixed, fault_program(sys.argv[1], name), **fields))
    for model, planned in SPIN_SET:
        program = export_trt_program(sys.argv[1], model, 256, planned_inputs=planned, dynamic=True)
        print(program.pte)
