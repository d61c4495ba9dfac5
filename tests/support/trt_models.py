"""The models behind the TensorRTBackend test programs, and their numpy references.

Kept free of torch and executorch imports so the GPU machine, where executorch.exir does not
import, can run programs exported elsewhere (see trt_programs.py) and still check their answers.
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# name -> (input shapes, numpy reference)
MODELS = {
    "add": ([(3, 5), (3, 5)], lambda x, y: x + y),
    "mixed": ([(3, 5), (3, 5)], lambda x, y: np.maximum(x + y, 0) + x),
    "matmul": ([(3, 7), (7, 5)], lambda a, b: a @ b),
    # image-sized, for bench/bench_shm.py --cuda
    "image_add": ([(1, 3, 224, 224), (1, 3, 224, 224)], lambda x, y: x + y),
    # rows of 64 values, dim 0 dynamic 1..32: the GPU-busy benchmark's batchable add
    # (bench/bench_gpu_busy.py, run by the spin provider, spin_engine_provider.py)
    "spin_add": ([(2, 64), (2, 64)], lambda x, y: x + y),
}

# The programs the GPU run uses: (model, planning alignment, engine in a .ptd).
GPU_SET = [("mixed", 16, False), ("mixed", 256, False), ("add", 16, True), ("matmul", 16, False)]

# Device-planned programs (model, planning alignment): the delegate targets cuda:0, so the
# method's inputs and outputs are planned in CUDA memory and the host copies requests in and
# results out. Only models whose inputs each feed the delegate alone qualify (ExecuTorch's rule
# for skipping its own host-to-device copy). At 16-byte planning some tensors sit off a 256-byte
# boundary inside the device buffer, which the delegate must then stage device-to-device.
DEVICE_PLANNED_SET = [("add", 256), ("matmul", 256), ("add", 16)]

# In-graph-copy programs (model, planning alignment): the delegate targets cuda:0 and the
# program is exported without the skip options, so ExecuTorch plans the method's inputs and
# outputs in host memory and inserts et_copy::_h2d_copy / _d2h_copy ops around each delegate,
# which copy through the CUDA DeviceAllocator the host registers. "mixed" has a CPU op between
# its two delegates, so its tensors go to the device, back, and to the device again.
IN_GRAPH_COPIES_SET = [("mixed", 256), ("matmul", 256), ("mixed", 16)]


# Programs whose inputs are left out of memory planning (model, planning alignment): the host
# hands the method the caller's buffer, so an input in device memory (a CUDA shared memory
# region) reaches the delegate as it is, bound directly when aligned, staged when not.
UNPLANNED_INPUTS_SET = [("add", 256), ("image_add", 256)]

# Programs whose inputs and outputs are both left out of memory planning (model, alignment):
# an output requested into device memory is then written there by the delegate itself.
# The image-sized one is bench/bench_images.py's case `cudatrt` (the whole request on the GPU).
UNPLANNED_OUTPUTS_SET = [("add", 256), ("image_add", 256)]

# CPU programs (linear + relu, no delegate) the device-input cases use beside the TensorRT ones:
# key -> file name in the programs folder (trt_programs.export_cpu_programs writes them there).
CPU_PROGRAMS = {
    "cpu_unplanned": "linear_relu_align256_unplanned",
    "cpu_unplanned_io": "linear_relu_align256_unplanned_unplanned_outputs",
}

# The GPU-busy benchmark's programs (model, inputs planned): planned for v2 binary and system
# shared memory, unplanned so that a CUDA shared-memory input reaches the delegate as it is.
SPIN_SET = [("spin_add", True), ("spin_add", False)]

# The GPU-fault test's programs (tests/gpu/test_gpu_fault_cuda.py): ("mixed", 256) with every
# plan given these fields (test_engine_provider.py), saved as mixed_256_<name>.pte.
FAULT_SET = {
    "sticky_illegal": {"test_sticky_fault": "illegal_address"},
    "sticky_misaligned": {"test_sticky_fault": "misaligned_address"},
    # Slow, so one of its executes is in flight when the bad model poisons the context.
    "kernel": {"test_cuda_kernel": True, "test_execute_delay_s": 0.3},
}


def fault_program(out_dir, name) -> Path:
    return Path(out_dir) / f"mixed_256_{name}.pte"


def program_name(
    model,
    alignment,
    external,
    device_planned=False,
    in_graph_copies=False,
    planned_inputs=True,
    planned_outputs=True,
    dynamic=False,
):
    suffix = "_cuda" if device_planned else "_cudacopies" if in_graph_copies else ""
    suffix += "_dynamic" if dynamic else ""
    suffix += "" if planned_inputs else "_unplanned"
    suffix += "" if planned_outputs else "_outunplanned"
    return f"trt_{model}_a{alignment}{'_ext' if external else ''}{suffix}"


@dataclass
class TrtProgram:
    pte: Path
    data_files: list = field(default_factory=list)
    model: str = ""

    @classmethod
    def at(
        cls,
        out_dir,
        model,
        alignment=16,
        external=False,
        device_planned=False,
        in_graph_copies=False,
        planned_inputs=True,
        planned_outputs=True,
        dynamic=False,
    ):
        name = program_name(
            model,
            alignment,
            external,
            device_planned,
            in_graph_copies,
            planned_inputs,
            planned_outputs,
            dynamic,
        )
        out_dir = Path(out_dir)
        return cls(
            out_dir / f"{name}.pte", [out_dir / f"{name}_engines.ptd"] if external else [], model
        )

    def exists(self):
        return self.pte.exists() and all(p.exists() for p in self.data_files)

    def reference(self, *inputs):
        return [MODELS[self.model][1](*inputs)]

    def example_inputs(self, seed=0):
        rng = np.random.default_rng(seed)
        return [rng.standard_normal(s).astype(np.float32) for s in MODELS[self.model][0]]
