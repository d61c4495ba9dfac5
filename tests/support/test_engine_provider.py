"""Test engine provider: a stand-in for TensorRT, for tests only (never shipped).

It implements the engine-provider seam (the calls TensorRTEngineProvider in
the service's TensorRT backend answers) over "plans" that are b"TESTPLAN" + JSON
describing a tiny computation it performs itself, reading and writing the bound addresses
through ethost_tensorrt.testing (host-simulated or CUDA memory alike). Like TensorRT it needs
every bound address on a 256-byte boundary; unlike TensorRT it checks, records every address it
binds (an unchanged one is not bound again), and refuses a misaligned one, so a staging bug
fails the test instead of computing garbage. It also counts its calls, so tests can show the
delegate reaches it once per steady execute.

Plan JSON: {"op": "add" | "matmul" | "scale" | "inplace_add" | "kernels", "io": [{"name",
"is_input", "dtype", "shape" (-1 dynamic), "profile_min", "profile_max"}, ...], "stats": {...}
optional}.
  add:         out0 = in0 + in1
  matmul:      out0 = in0 @ in1
  scale:       out0 = in0 * 2
  inplace_add: in0 += in1, written through out0, which must be bound to in0's address.
  kernels:     out0 = in0 + (kernels - 1), as `kernels` (default 10) CUDA kernels enqueued on the
               stream with cupy, nothing synchronous: an engine a CUDA graph can capture (GPU
               hosts only).
Like TensorRT's engine it holds its weights on the device: a deserialized engine allocates its
resident weights (stats total_weights_size, less the streamed part once a budget is set) and
each execution context its device_memory_size, through the delegate's device memory (host
stand-in or CUDA), so device-size accounting and sharing are real. Weight streaming: stats
streamable_weights_size > 0 makes set_weight_streaming_budget apply (recorded in `budgets`).
A context created user-managed (the shared activation scratch) holds no memory and refuses an
execute before some was bound (recorded in `scratches`).
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
kernel on CUDA memory (a trivial kernel, to show a context works). A plan with
"test_execute_delay_s": seconds makes every execute take that much longer (it sleeps after its
work is queued, before the delegate's stream synchronize), so an execute of it is in flight when
another model poisons the context: the GPU-fault tests' innocent bystander. The stand-in
plays TensorRT `tensorrt_version`, which the ingest check reports as this server's TensorRT.
"""

import collections
import json
import os
import sys
import time

import ethost_tensorrt
import numpy as np

from support import cuda_kernels

ALIGNMENT = 256
DEFAULT_STATS = {
    "stripped_weights_size": -1,
    "total_weights_size": 0,
    "refittable": False,
    "device_memory_size": 0,
    "streamable_weights_size": 0,
}


# The CUDA runtime's words for the sticky errors the stand-in causes.
STICKY_FAULTS = {
    "illegal_address": "cudaErrorIllegalAddress: an illegal memory access was encountered",
    "misaligned_address": "cudaErrorMisalignedAddress: misaligned address",
}


class MisalignedAddress(AssertionError):
    pass


class _DeviceBytes:
    """Device memory held while the owner lives (weights of an engine, scratch of a context)."""

    def __init__(self, nbytes):
        self.address = ethost_tensorrt.testing.device_alloc(nbytes) if nbytes > 0 else 0

    def __del__(self):
        if self.address:
            ethost_tensorrt.testing.device_free(self.address)


class _Engine:
    def __init__(self, spec, device_id):
        self.spec = spec
        self.device_id = device_id
        self.inputs = [t for t in spec["io"] if t["is_input"]]
        self.outputs = [t for t in spec["io"] if not t["is_input"]]
        self.stats = {**DEFAULT_STATS, **spec.get("stats", {})}
        self.budget = -1
        self.weights = _DeviceBytes(self.resident_weights())

    def resident_weights(self):
        total = max(self.stats["total_weights_size"], 0)
        streamable = self.stats["streamable_weights_size"]
        if self.budget < 0 or streamable <= 0:
            return total
        return total - streamable + self.budget


class _Context:
    def __init__(self, engine, user_managed):
        self.engine = engine
        self.shapes = {}
        self.addresses = {}
        self.user_managed = user_managed
        # A user-managed context holds no activation memory: each execute may bind some.
        self.scratch = None if user_managed else _DeviceBytes(engine.stats["device_memory_size"])
        self.bound_scratch = None


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
        self.budgets = []  # every weight-streaming budget set, in bytes
        self.scratches = []  # every (address, size) of shared scratch bound to a context

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
            "stats": {**engine.stats, "weight_streaming_budget": engine.budget},
        }

    def set_weight_streaming_budget(self, engine, budget):
        """As TensorRT's weight_streaming_budget_v2: weights beyond the budget leave the device."""
        self.calls["set_weight_streaming_budget"] += 1
        if not 0 <= budget <= engine.stats["streamable_weights_size"]:
            raise ValueError(f"budget {budget} outside [0, streamable weights]")
        self.budgets.append(budget)
        engine.budget = budget
        engine.weights = None  # the old allocation goes before the new one is made
        engine.weights = _DeviceBytes(engine.resident_weights())

    def create_context(self, engine, user_managed=False):
        return _Context(engine, user_managed)

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

    def execute(self, ctx, input_shapes, addresses, stream, scratch=None):
        self.calls["execute"] += 1
        if scratch is not None:
            address, size = scratch
            if address % ALIGNMENT or size < ctx.engine.stats["device_memory_size"]:
                raise ValueError(f"scratch {address:#x} of {size} bytes cannot serve this context")
            ctx.bound_scratch = scratch
            self.scratches.append(scratch)
        if ctx.user_managed and ctx.bound_scratch is None:
            raise AssertionError("a user-managed context executed with no device memory bound")
        if input_shapes is not None:
            self._set_shapes(ctx, input_shapes)
        if addresses is not None:
            for t, address in zip(ctx.engine.spec["io"], addresses, strict=True):
                if ctx.addresses.get(t["name"]) != address:
                    self._bind(ctx, t["name"], address)
        self.streams.append(stream)
        e = ctx.engine
        if e.spec["op"] == "kernels":
            return self._kernels(ctx, stream)
        # The delegate's staging copies were queued on `stream`; this engine reads synchronously.
        ethost_tensorrt.testing.stream_synchronize(stream)
        self._run(ctx, ctx.engine, stream)
        time.sleep(float(ctx.engine.spec.get("test_execute_delay_s", 0)))

    def _run(self, ctx, e, stream):
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

    def _kernels(self, ctx, stream):
        import cupy  # GPU hosts only

        e = ctx.engine
        t_in, t_out = e.inputs[0], e.outputs[0]
        shape = ctx.shapes[t_in["name"]]
        dtype = np.dtype(t_in["dtype"])
        nbytes = int(np.prod(shape)) * dtype.itemsize

        def array(address):
            # The device given, so cupy does not query the pointer (not while capturing).
            memory = cupy.cuda.UnownedMemory(address, nbytes, None, e.device_id)
            return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0))

        with cupy.cuda.ExternalStream(stream):
            out = array(ctx.addresses[t_out["name"]])
            cupy.copyto(out, array(ctx.addresses[t_in["name"]]))
            for _ in range(int(e.spec.get("kernels", 10)) - 1):
                out += 1

    def _poison(self, ctx, how, stream):
        if how not in STICKY_FAULTS:
            raise ValueError(f"unknown test_sticky_fault {how!r} (one of {sorted(STICKY_FAULTS)})")
        if self.on_cuda:
            first = ctx.addresses[ctx.engine.inputs[0]["name"]]
            cuda_kernels.write_through(0x10 if how == "illegal_address" else first + 1, stream)
        else:
            ethost_tensorrt.testing.poison_device(f"{STICKY_FAULTS[how]} (simulated)")
