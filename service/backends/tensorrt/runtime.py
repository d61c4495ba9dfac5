"""The one module that talks to TensorRT's Python API.

Production images (NVIDIA TensorRT / JetPack containers) ship the full `tensorrt` module; hosts
that can only install from PyPI get the lean runtime, whose bindings import as
`tensorrt_lean_bindings` (or `tensorrt_lean` where the metapackage adds that name). Everything here
uses the part both share -- deserialize, inspect, run -- so either works.

TensorRT is imported on first use, not at import time: the service imports this module on hosts
without TensorRT too, to say why plans there cannot be verified or run.

The native backend (`ethost_tensorrt`) owns CUDA memory, streams and staging; it calls the
provider below holding the GIL only for these calls, so each method stays a thin pass-through
that turns TensorRT's boolean/None failures into exceptions carrying TensorRT's own log lines.
An execute costs one call (`execute`: new shapes, moved addresses, enqueue), plus `infer_shapes`
under the same GIL hold when the input shapes are new to the delegate.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType

from service import cuda as service_cuda
from service.backends.tensorrt import BACKEND_ID
from service.backends.tensorrt.cuda_driver import TensorRTError, cuda_driver
from service.shared.limits import ALIGNMENT

# Full TensorRT first: where both exist, it is the one the image was built and tested with.
MODULE_CANDIDATES = ("tensorrt", "tensorrt_lean", "tensorrt_lean_bindings")

# TensorRT requires every bound address to be a multiple of this and does not check it: the
# alignment every arena slot has (one definition, runtime_ext/common/contract_limits.h).
ADDRESS_ALIGNMENT = ALIGNMENT

# TensorRT DataType member names -> numpy dtype names the native host uses. INT4, FP4 and E8M0
# have no ExecuTorch scalar type, so an engine binding them cannot be fed by a delegate call.
_DTYPE_NAMES = {
    "FLOAT": "float32",
    "HALF": "float16",
    "BF16": "bfloat16",
    "INT8": "int8",
    "INT32": "int32",
    "INT64": "int64",
    "BOOL": "bool",
    "UINT8": "uint8",
    "FP8": "float8_e4m3fn",
}

_log = logging.getLogger(__name__)


def import_first(names) -> tuple[ModuleType | None, list[str]]:
    """Returns the first importable module of `names`, and why each one before it failed.

    A module that exists but fails to import (e.g. the lean bindings without their libs wheel)
    is reported with its own error, not as "not installed", so an operator sees what to fix.
    """
    reasons = []
    for name in names:
        try:
            return importlib.import_module(name), reasons
        except ModuleNotFoundError as exc:
            reasons.append(f"{name}: not installed" if exc.name == name else f"{name}: {exc}")
        except (ImportError, OSError) as exc:
            reasons.append(f"{name}: {exc}")
    return None, reasons


@functools.cache
def _tensorrt() -> tuple[ModuleType | None, str]:
    module, reasons = import_first(MODULE_CANDIDATES)
    if module is None:
        return None, "no TensorRT runtime module (" + "; ".join(reasons) + ")"
    return module, ""


def tensorrt_version() -> str | None:
    """The version of the TensorRT module plans are deserialized with here; None without one.

    Imports it (once per process), so it is the version of exactly what would run the plans.
    """
    module, _ = _tensorrt()
    version = getattr(module, "__version__", None) if module is not None else None
    return str(version) if version else None


def tensorrt_module() -> ModuleType:
    module, reason = _tensorrt()
    if module is None:
        raise TensorRTError(reason)
    return module


def availability() -> tuple[bool, str]:
    """Whether TensorRT plans can be deserialized and run here, and the reason if not."""
    module, reason = _tensorrt()
    if module is None:
        return False, reason
    cuda = cuda_driver()
    try:
        count = cuda.device_count()
    except TensorRTError as exc:
        return False, str(exc)
    if count == 0:
        return False, cuda.reason or "no CUDA device"
    version = getattr(module, "__version__", "unknown version")
    device = service_cuda.describe(0)  # name and compute capability, with cuda-python
    return True, f"{module.__name__} {version} with {count} CUDA device(s)" + (
        f", device 0 {device}" if device else ""
    )


# TensorRT's ILogger.Severity values: INTERNAL_ERROR 0, ERROR 1, WARNING 2, INFO 3, VERBOSE 4.
_ERROR = 1
_WARNING = 2

_capture = threading.local()


@contextmanager
def _captured_log():
    """Collects TensorRT's warnings and errors logged by this thread while the block runs.

    Thread-local rather than a lock: the native backend enqueues from many threads at once, and
    TensorRT logs on the calling thread.
    """
    messages: list[tuple[int, str]] = []
    _capture.messages = messages
    try:
        yield messages
    finally:
        _capture.messages = None


def _failure(what: str, messages: list[tuple[int, str]]) -> TensorRTError:
    reasons = "; ".join(text for _, text in messages)
    return TensorRTError(f"{what}: " + (reasons or "TensorRT gave no reason"))


def _logger(trt: ModuleType):
    class CapturingLogger(trt.ILogger):
        def __init__(self):
            trt.ILogger.__init__(self)

        def log(self, severity, msg):
            level = int(severity)
            _log.log(
                logging.ERROR
                if level <= _ERROR
                else logging.WARNING
                if level == _WARNING
                else logging.DEBUG,
                "TensorRT: %s",
                msg,
            )
            messages = getattr(_capture, "messages", None)
            if messages is not None and level <= _WARNING:
                messages.append((level, msg))

    return CapturingLogger()


_runtime_lock = threading.Lock()
_runtime_state: dict = {}


def _runtime():
    """One TensorRT Runtime (and logger) per process, as TensorRT recommends.

    Without a usable CUDA device TensorRT logs an error yet still returns a Runtime, which
    crashes the process when used or even destroyed (seen with the lean runtime 11.4). Its logged
    errors are what mark it unusable; it is then kept alive, never freed, and the failure is
    repeated to every later caller.
    """
    with _runtime_lock:
        if not _runtime_state:
            trt = tensorrt_module()
            logger = _logger(trt)
            with _captured_log() as messages:
                try:
                    runtime = trt.Runtime(logger)
                except (TypeError, RuntimeError) as exc:
                    messages.append((_ERROR, str(exc)))
                    runtime = None
            failed = runtime is None or any(level <= _ERROR for level, _ in messages)
            _runtime_state.update(
                runtime=runtime,
                logger=logger,
                failure=_failure("creating the TensorRT runtime failed", messages)
                if failed
                else None,
            )
        if _runtime_state["failure"] is not None:
            raise TensorRTError(str(_runtime_state["failure"]))
        return _runtime_state["runtime"]


@dataclass(frozen=True)
class Engine:
    """A deserialized engine and the device it lives on (contexts must be made there too)."""

    cuda_engine: object
    device_id: int


class Context:
    """An execution context; holds its engine so the engine outlives every context using it.

    Also the binding names in engine order, and the address each binding holds now, so that an
    execute re-binds only what moved.
    """

    __slots__ = ("execution_context", "engine", "inputs", "outputs", "names", "bound")

    def __init__(self, execution_context, engine: Engine, inputs, outputs, names):
        self.execution_context = execution_context
        self.engine = engine
        self.inputs = inputs
        self.outputs = outputs
        self.names = names
        self.bound = [None] * len(names)


def _dtype_name(trt_dtype, tensor: str) -> str:
    name = getattr(trt_dtype, "name", str(trt_dtype))
    if name not in _DTYPE_NAMES:
        raise TensorRTError(
            f"engine tensor {tensor!r} has TensorRT dtype {name}, which an "
            f"ExecuTorch delegate call cannot carry"
        )
    return _DTYPE_NAMES[name]


class TensorRTEngineProvider:
    """The shipped engine provider installed with `ethost_tensorrt.set_engine_provider`."""

    def deserialize(self, plan: bytes, device_id: int) -> Engine:
        with cuda_driver().current(device_id):
            runtime = _runtime()
            with _captured_log() as messages:
                engine = runtime.deserialize_cuda_engine(plan)
        if engine is None:
            raise _failure(
                f"TensorRT could not deserialize the plan ({len(plan)} bytes) on CUDA "
                f"device {device_id}",
                messages,
            )
        return Engine(engine, device_id)

    def describe(self, engine: Engine) -> dict:
        trt = tensorrt_module()
        cuda_engine = engine.cuda_engine
        io = []
        for i in range(cuda_engine.num_io_tensors):
            name = cuda_engine.get_tensor_name(i)
            is_input = cuda_engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
            profile_min = profile_max = None
            if is_input:
                # [min, opt, max] of optimization profile 0, the only one the backend uses.
                bounds = cuda_engine.get_tensor_profile_shape(name, 0)
                if len(bounds) == 3:
                    profile_min, profile_max = list(bounds[0]), list(bounds[2])
            io.append(
                {
                    "name": name,
                    "is_input": is_input,
                    "dtype": _dtype_name(cuda_engine.get_tensor_dtype(name), name),
                    "shape": list(cuda_engine.get_tensor_shape(name)),
                    "location": cuda_engine.get_tensor_location(name).name.lower(),
                    "profile_min": profile_min,
                    "profile_max": profile_max,
                    # Refused by the delegate and at ingest: it cannot feed a tensor's values
                    # to TensorRT's shape inference.
                    "shape_tensor": bool(cuda_engine.is_shape_inference_io(name)),
                }
            )
        memory = getattr(cuda_engine, "device_memory_size_v2", None)
        if memory is None:
            memory = cuda_engine.device_memory_size
        # TensorRT 10.1+; 0 unless the plan was built with BuilderFlag.WEIGHT_STREAMING.
        streamable = int(getattr(cuda_engine, "streamable_weights_size", 0) or 0)
        return {
            "io": io,
            "stats": {
                "stripped_weights_size": int(
                    cuda_engine.get_engine_stat(trt.EngineStat.STRIPPED_WEIGHTS_SIZE)
                ),
                "total_weights_size": int(
                    cuda_engine.get_engine_stat(trt.EngineStat.TOTAL_WEIGHTS_SIZE)
                ),
                "refittable": bool(cuda_engine.refittable),
                "device_memory_size": int(memory),
                "streamable_weights_size": streamable,
                # Bytes of the streamable weights kept on the device (all of them until a
                # budget is set); -1 where nothing streams.
                "weight_streaming_budget": (
                    int(cuda_engine.weight_streaming_budget_v2) if streamable > 0 else -1
                ),
            },
        }

    def set_weight_streaming_budget(self, engine: Engine, budget: int) -> None:
        """Keeps `budget` bytes of the streamable weights on the device (the delegate calls it
        before any execution context exists, as TensorRT requires)."""
        cuda_engine = engine.cuda_engine
        with cuda_driver().current(engine.device_id), _captured_log() as messages:
            cuda_engine.weight_streaming_budget_v2 = int(budget)
            applied = int(cuda_engine.weight_streaming_budget_v2)
        if applied != int(budget):
            raise _failure(
                f"TensorRT did not take the weight streaming budget {budget} (it holds {applied})",
                messages,
            )

    def create_context(self, engine: Engine, user_managed: bool = False) -> Context:
        """user_managed: the context holds no activation memory; every execute binds the
        delegate's shared scratch (TensorRT's USER_MANAGED allocation strategy)."""
        trt = tensorrt_module()
        cuda_engine = engine.cuda_engine
        with cuda_driver().current(engine.device_id), _captured_log() as messages:
            context = (
                cuda_engine.create_execution_context(
                    trt.ExecutionContextAllocationStrategy.USER_MANAGED
                )
                if user_managed
                else cuda_engine.create_execution_context()
            )
        if context is None:
            raise _failure("TensorRT could not create an execution context", messages)
        names = tuple(cuda_engine.get_tensor_name(i) for i in range(cuda_engine.num_io_tensors))
        inputs = tuple(n for n in names if cuda_engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT)
        outputs = tuple(n for n in names if n not in inputs)
        return Context(context, engine, inputs, outputs, names)

    def infer_shapes(self, ctx: Context, input_shapes: list[list[int]]) -> list[list[int]]:
        """Sets the input shapes (engine input order); returns the outputs' (engine order)."""
        context = ctx.execution_context
        _capture.messages = messages = []
        try:
            for name, shape in zip(ctx.inputs, input_shapes, strict=True):
                if not context.set_input_shape(name, tuple(shape)):
                    raise _failure(
                        f"TensorRT refused shape {list(shape)} for input {name!r}", messages
                    )
            shapes = [list(context.get_tensor_shape(name)) for name in ctx.outputs]
        finally:
            _capture.messages = None
        for name, shape in zip(ctx.outputs, shapes):
            if any(dim < 0 for dim in shape):
                raise _failure(
                    f"TensorRT cannot infer the shape of output {name!r} ({shape}) "
                    f"from the input shapes; data-dependent output shapes are not "
                    f"supported",
                    messages,
                )
        return shapes

    def execute(self, ctx: Context, input_shapes, addresses, stream: int, scratch=None) -> None:
        """One delegate execute: new input shapes (or None), every binding's address in engine
        order when any moved (or None), the shared scratch (address, size) when it moved, then
        enqueue on `stream`. Only moved addresses are bound again."""
        context = ctx.execution_context
        # Set directly rather than through _captured_log(): this runs on every execute.
        _capture.messages = messages = []
        try:
            if scratch is not None:
                context.set_device_memory(*scratch)
            if input_shapes is not None:
                for name, shape in zip(ctx.inputs, input_shapes, strict=True):
                    if not context.set_input_shape(name, tuple(shape)):
                        raise _failure(
                            f"TensorRT refused shape {list(shape)} for input {name!r}", messages
                        )
            if addresses is not None:
                bound = ctx.bound
                for i, address in enumerate(addresses):
                    if bound[i] != address:
                        _bind(context, ctx.names[i], address, messages)
                        bound[i] = address
            if not context.execute_async_v3(stream):
                raise _failure("TensorRT failed to enqueue the engine", messages)
        finally:
            _capture.messages = None


def _bind(context, name: str, address: int, messages) -> None:
    if address % ADDRESS_ALIGNMENT:
        raise TensorRTError(
            f"address {address:#x} for tensor {name!r} is not a multiple of "
            f"{ADDRESS_ALIGNMENT}; TensorRT would fault or compute garbage"
        )
    if not context.set_tensor_address(name, address):
        raise _failure(f"TensorRT refused the address of tensor {name!r}", messages)


def install_backend() -> None:
    """The TensorRT backend's setup (service.backends.tensorrt.BACKEND).

    Loads the delegate library into the native host's backend registry and installs the
    shipped provider. It fails loudly when another library already holds the backend id, since
    programs would otherwise run on a delegate nobody here checked. TensorRT itself is not needed
    until a plan is deserialized, so this also runs on hosts without it.
    """
    import ethost

    spec = importlib.util.find_spec("ethost_tensorrt")
    if spec is None or spec.origin is None:
        raise RuntimeError("the TensorRT backend library (ethost_tensorrt) is not installed")
    ethost.load_backend_library(spec.origin)
    import ethost_tensorrt

    error = ethost_tensorrt.registration_error()
    if error is not None:
        raise RuntimeError(f"{BACKEND_ID} could not be registered: {error}")
    # Its delegates bind device pointers (staging them only off a 256-byte boundary), so an
    # input in device memory (CUDA shared memory) that only they read is handed over as is.
    ethost.accept_device_memory(BACKEND_ID)
    ethost_tensorrt.set_engine_provider(TensorRTEngineProvider())
