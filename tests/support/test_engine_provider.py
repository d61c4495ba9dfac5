"""Test engine provider: a stand-in for TensorRT, for tests only (never shipped).

It implements the engine-provider seam (the calls TensorRTEngineProvider in
the service's TensorRT backend answers) over "plans" that are b"TESTPLAN" + JSON
describing a tiny computation it performs itself, reading and writing the bound addresses
through ethost_tensorrt.testing (host-simulated or CUDA memory alike). Like TensorRT it needs
every bound address on a 256-byte boundary; unlike TensorRT it checks, records every address it
binds (an unchanged one is not bound again), and refuses a misaligned one, so a staging bug
fails the test instead of computing garbage. It also counts its calls, so tests can show the
delegate reaches it once per steady execute.

Plan JSON: {"op": "add" | "matmul" | "scale" | "inplace_add", "io": [{"name", "is_input",
"dtype", "shape" (-1 dynamic), "profile_min", "profile_max"}, ...], "stats": {...} optional}.
  add:         out0 = in0 + in1
  matmul:      out0 = in0 @ in1
  scale:       out0 = in0 * 2
  inplace_add: in0 += in1, written through out0, which must be bound to in0's address.
ETRT_TEST_DESERIALIZE_LOG names a file that gets one line ("<pid> <op>") per deserialization.
A plan with "test_abort_on_deserialize": true makes deserialize abort the process, as a
malformed plan can crash TensorRT's deserializer; tests use it to show the server survives.
A plan with "test_tensorrt_log": [lines] is refused the way the shipped provider refuses a plan
TensorRT would not deserialize: an exception carrying the lines TensorRT logged (tests pass
TensorRT's real wordings, e.g. for a plan built by another TensorRT release). A plan with
"test_fail_execute": "why" fails every execute with that reason, as an enqueue fails on a GPU
fault: the server's fault, never the request's. A plan with "test_sticky_fault": "illegal_address"
| "misaligned_address" poisons the device context on every execute, as a TensorRT kernel writing
through a bad address does: on CUDA memory (a GPU host) it launches such a kernel on the
execute's stream (cupy); on the host-memory stand-in it puts the stand-in in the sticky state
(ethost_tensorrt.testing.poison_device). Either way the execute returns and the delegate's stream
synchronize meets the error, and the device says its context is poisoned: the seam the service
classifies GPU faults through. A plan with "test_cuda_kernel": true computes "add" with a CUDA
kernel on CUDA memory (a trivial kernel, to show a context works). The stand-in
plays TensorRT `tensorrt_version`, which the ingest check reports as this server's TensorRT.
"""

import collections
import json
import os
import sys

import ethost_tensorrt
import numpy as np

from support import cuda_kernels

ALIGNMENT = 256
DEFAULT_STATS = {
    "stripped_weights_size": -1,
    "total_weights_size": 0,
    "refittable": False,
    "device_memory_size": 0,
}


# The CUDA runtime's words for the sticky errors the stand-in causes.
STICKY_FAULTS = {
    "illegal_address": "cudaErrorIllegalAddress: an illegal memory access was encountered",
    "misaligned_address": "cudaErrorMisalignedAddress: misaligned address",
}


class MisalignedAddress(AssertionError):
    pass


class _Engine:
    def __init__(self, spec, device_id):
        self.spec = spec
        self.device_id = device_id
        self.inputs = [t for t in spec["io"] if t["is_input"]]
        self.outputs = [t for t in spec["io"] if not t["is_input"]]


class _Context:
    def __init__(self, engine):
        self.engine = engine
        self.shapes = {}
        self.addresses = {}


class TestEngineProvider:
    __test__ = False  # not a pytest test class

    tensorrt_version = "11.1.0.test"

    def __init__(self, on_cuda: bool = False):
        self.on_cuda = on_cuda  # real CUDA memory (install_test_backend_on_cuda)
        self.deserialized = 0
        self.addresses = []  # (name, address) for every address bound
        self.streams = []  # stream of every execute
        self.misaligned = []
        self.calls = collections.Counter()  # provider calls by name

    def deserialize(self, plan, device_id):
        plan = bytes(plan)
        if not plan.startswith(b"TESTPLAN"):
            raise ValueError(f"not a test plan: magic {plan[:8]!r}")
        spec = json.loads(plan[8:])
        if spec.get("test_abort_on_deserialize"):
            sys.stderr.write("test engine provider: aborting in deserialize on purpose\n")
            sys.stderr.flush()
            os.abort()
        if "test_tensorrt_log" in spec:
            raise RuntimeError(
                f"TensorRT could not deserialize the plan ({len(plan)} bytes) on "
                f"CUDA device {device_id}: " + "; ".join(spec["test_tensorrt_log"])
            )
        self.deserialized += 1
        log = os.environ.get("ETRT_TEST_DESERIALIZE_LOG")
        if log:  # deserializations in other processes (the ingest check child), for tests
            with open(log, "a") as out:
                out.write(f"{os.getpid()} {spec['op']}\n")
        return _Engine(spec, device_id)

    def describe(self, engine):
        return {
            "io": [dict(t) for t in engine.spec["io"]],
            "stats": {**DEFAULT_STATS, **engine.spec.get("stats", {})},
        }

    def create_context(self, engine):
        return _Context(engine)

    def _set_shapes(self, ctx, shapes):
        for t, shape in zip(ctx.engine.inputs, shapes, strict=True):
            ctx.shapes[t["name"]] = [int(d) for d in shape]

    def infer_shapes(self, ctx, input_shapes):
        self.calls["infer_shapes"] += 1
        self._set_shapes(ctx, input_shapes)
        ins = [ctx.shapes[t["name"]] for t in ctx.engine.inputs]
        # Shapes the engine's layers cannot take are refused here, as TensorRT's shape
        # inference refuses them, not met later as a fault while executing.
        if ctx.engine.spec["op"] == "matmul":
            if ins[0][1] != ins[1][0]:
                raise ValueError(f"matmul of {ins[0]} by {ins[1]}: inner dimensions differ")
            return [[ins[0][0], ins[1][1]]]
        if any(shape != ins[0] for shape in ins):
            raise ValueError(f"{ctx.engine.spec['op']} of shapes {ins}: they differ")
        return [list(ins[0]) for _ in ctx.engine.outputs]

    def _bind(self, ctx, name, address):
        self.addresses.append((name, address))
        if address == 0 or address % ALIGNMENT:
            self.misaligned.append((name, address))
            raise MisalignedAddress(f"{name} bound at {address:#x}, not a multiple of {ALIGNMENT}")
        ctx.addresses[name] = address

    def _read(self, ctx, t, shape):
        dtype = np.dtype(t["dtype"])
        n = int(np.prod(shape)) * dtype.itemsize
        raw = ethost_tensorrt.testing.device_read(ctx.addresses[t["name"]], n)
        return np.frombuffer(raw, dtype=dtype).reshape(shape)

    def _write(self, ctx, t, value):
        value = np.ascontiguousarray(value, dtype=np.dtype(t["dtype"]))
        ethost_tensorrt.testing.device_write(ctx.addresses[t["name"]], value.tobytes())

    def execute(self, ctx, input_shapes, addresses, stream):
        self.calls["execute"] += 1
        if input_shapes is not None:
            self._set_shapes(ctx, input_shapes)
        if addresses is not None:
            for t, address in zip(ctx.engine.spec["io"], addresses, strict=True):
                if ctx.addresses.get(t["name"]) != address:
                    self._bind(ctx, t["name"], address)
        self.streams.append(stream)
        # The delegate's staging copies were queued on `stream`; this engine reads synchronously.
        ethost_tensorrt.testing.stream_synchronize(stream)
        e = ctx.engine
        if "test_fail_execute" in e.spec:
            raise RuntimeError(e.spec["test_fail_execute"])
        if "test_sticky_fault" in e.spec:
            return self._poison(ctx, e.spec["test_sticky_fault"], stream)
        if e.spec.get("test_cuda_kernel") and self.on_cuda:
            return cuda_kernels.add(ctx, e, stream)
        a = [self._read(ctx, t, ctx.shapes[t["name"]]) for t in e.inputs]
        out = e.outputs[0]
        op = e.spec["op"]
        if op == "add":
            self._write(ctx, out, a[0] + a[1])
        elif op == "matmul":
            self._write(ctx, out, a[0] @ a[1])
        elif op == "scale":
            self._write(ctx, out, a[0] * 2)
        elif op == "inplace_add":
            if ctx.addresses[out["name"]] != ctx.addresses[e.inputs[0]["name"]]:
                raise AssertionError("in-place output not bound to its input's address")
            self._write(ctx, out, a[0] + a[1])
        else:
            raise ValueError(f"unknown test op {op!r}")

    def _poison(self, ctx, how, stream):
        if how not in STICKY_FAULTS:
            raise ValueError(f"unknown test_sticky_fault {how!r} (one of {sorted(STICKY_FAULTS)})")
        if self.on_cuda:
            first = ctx.addresses[ctx.engine.inputs[0]["name"]]
            cuda_kernels.write_through(0x10 if how == "illegal_address" else first + 1, stream)
        else:
            ethost_tensorrt.testing.poison_device(f"{STICKY_FAULTS[how]} (simulated)")
