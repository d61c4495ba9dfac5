"""Ingest check for TensorRT delegates (backend id `TensorRTBackend`).

A TensorRT plan is opaque to every generic rule, and the worst ways it can fail do not fail: a
plan saved without its weights runs with placeholder weights, and a delegate buffer off a 256-byte
boundary costs a copy on every call. So each engine is deserialized here, with the TensorRT runtime
that would serve it, before the upload is accepted, and what was found is recorded in the model's
description. Where no TensorRT runtime or CUDA device exists, nothing about the plans can be
verified, so such uploads are refused unless the operator explicitly allows storing them
unverified (ETRT_ALLOW_UNVERIFIED_PLANS=1 / --allow-unverified-plans); they are then kept but not
runnable on this host.
"""
from __future__ import annotations

from service import tensorrt_runtime
from service.ingest import DelegateReport, IngestContext, register_delegate_check
from service.ingest_rules import Problem
from service.program_inspection import DelegateInfo, MethodInfo

BACKEND_ID = "TensorRTBackend"
ALIGNMENT = tensorrt_runtime.ADDRESS_ALIGNMENT
STRIPPED_HINT = "saved without its weights; re-export with strip_engine_weights=False"
PLANNING_HINT = ("re-export with 256-byte memory planning (ExecutorchBackendConfig("
                 "memory_planning_pass=MemoryPlanningPass(alignment=256)))")
UNVERIFIED_OPTION = "ETRT_ALLOW_UNVERIFIED_PLANS=1 (--allow-unverified-plans)"


def stripped_weights_problem(stripped: int, total: int) -> str | None:
    """TensorRT's stats say whether a plan lacks weights; returns why it must be refused, if so.

    STRIPPED_WEIGHTS_SIZE is -1 when the plan is not marked stripped, and for a plan built with
    STRIP_PLAN it is the weight bytes the plan still holds, equal to the total when TensorRT found
    nothing to strip. Only a plan holding fewer bytes than its total computes with placeholders.
    """
    if 0 <= stripped < total:
        return f"{STRIPPED_HINT} (the plan holds {stripped} of its {total} weight bytes)"
    return None


def _argument_bindings(metadata: dict, argument_count: int) -> list[tuple[str | None, bool]]:
    """(binding name, is_input) per delegate argument: inputs, then the outputs passed.

    The exporter may elide outputs that update an input in place; the argument count is the only
    sign of it, so the names are matched the way the backend matches them.
    """
    bindings = metadata["io_bindings"]
    inputs = [b["name"] for b in bindings if b["is_input"]]
    outputs = [b["name"] for b in bindings if not b["is_input"]]
    aliased = {a["output"] for a in metadata["aliased_io"]}
    if argument_count == len(inputs) + len(outputs) - len(aliased):
        outputs = [name for name in outputs if name not in aliased]
    named = [(name, True) for name in inputs] + [(name, False) for name in outputs]
    return [named[i] if i < len(named) else (None, False) for i in range(argument_count)]


def placement_report(method: MethodInfo, delegate: DelegateInfo, metadata: dict) -> dict:
    """Where the memory planner put each tensor this delegate binds, and the copies that costs.

    A planned buffer's address is its arena's base (256-aligned by the host) plus its planned
    offset, so the offset alone says whether TensorRT can take the buffer as it is. A buffer off
    the boundary is staged: one copy per call, two for an input an output updates in place.
    Unplanned tensors (caller-bound inputs, constants) depend on the caller and are not counted.
    That count is exact for buffers planned in device memory and on a GPU that reads host memory
    (Jetson). On a discrete GPU a buffer in host memory crosses to the device on every call
    whatever its alignment, so the report also counts those (host_memory_buffers).
    """
    updated_in_place = {a["input"] for a in metadata["aliased_io"]}
    buffers = []
    copies = 0
    for value, (name, is_input) in zip(delegate.call_args,
                                       _argument_bindings(metadata, len(delegate.call_args))):
        tensor = method.tensors.get(value)
        if tensor is None:
            continue
        entry = {"binding": name, "is_input": is_input, "value": value,
                 "memory_id": tensor.memory_id, "offset": tensor.memory_offset,
                 "memory": method.planned_buffer_devices.get(tensor.memory_id, "cpu")}
        if tensor.memory_offset is None:
            entry["aligned"] = None
        else:
            entry["aligned"] = tensor.memory_offset % ALIGNMENT == 0
            if not entry["aligned"]:
                copies += 2 if is_input and name in updated_in_place else 1
        buffers.append(entry)
    report = {"buffers": buffers, "expected_staging_copies_per_call": copies,
              "host_memory_buffers": sum(1 for b in buffers
                                         if b["aligned"] is not None and b["memory"] == "cpu")}
    if copies:
        unaligned = [b["binding"] or f"argument value {b['value']}" for b in buffers
                     if b["aligned"] is False]
        report["hint"] = (f"{len(unaligned)} planned buffer(s) ({', '.join(unaligned)}) are not "
                          f"on a {ALIGNMENT}-byte boundary and are copied on every call; "
                          f"{PLANNING_HINT}")
    return report


def _where(delegate: DelegateInfo) -> str:
    return f"method {delegate.method!r} delegate {delegate.index} ({BACKEND_ID})"


def _parse(blob: bytes) -> dict:
    """The backend's own blob reader, so ingest accepts and refuses exactly what it would load.

    Imported here, not at module import: the service imports the checks before it runs the
    backend setup that loads this library into the native host.
    """
    import ethost_tensorrt

    return ethost_tensorrt.parse_blob(blob)


def _binding_mismatch(metadata: dict, engine_io: list[dict]) -> str | None:
    declared = {b["name"]: bool(b["is_input"]) for b in metadata["io_bindings"]}
    actual = {t["name"]: t["is_input"] for t in engine_io}
    if declared == actual:
        return None
    return (f"the blob's io_bindings {sorted(declared)} do not match the engine's I/O tensors "
            f"{sorted(actual)} (names and directions must be the same)")


def _verifier() -> tuple[object, bool, str]:
    """(provider, can verify, why not): checks use the provider the backend will serve with.

    That is the shipped TensorRT provider unless another one was installed in the backend (the
    test engine provider in CI), which is then trusted to refuse by itself what it cannot load.
    """
    import ethost_tensorrt

    installed = ethost_tensorrt.engine_provider()
    if installed is None or isinstance(installed, tensorrt_runtime.TensorRTEngineProvider):
        ok, reason = tensorrt_runtime.availability()
        return tensorrt_runtime.TensorRTEngineProvider(), ok, reason
    return installed, True, ""


def _verify_engine(provider, engine_bytes: bytes, metadata: dict, report: DelegateReport,
                   delegate: DelegateInfo, program_name: str) -> None:
    device = metadata["device_id"]
    if not 0 <= device < tensorrt_runtime.device_count():
        device = 0
    try:
        description = provider.describe(provider.deserialize(engine_bytes, device))
    except Exception as exc:  # providers raise whatever they raise, always with a reason
        report.problems.append(Problem(program_name, "tensorrt.plan_invalid",
                                       f"{_where(delegate)}: {exc}"))
        return
    stats = description["stats"]
    report.details["engine"] = {
        "weight_bytes": stats["total_weights_size"],
        "stripped_weights_size": stats["stripped_weights_size"],
        "refittable": stats["refittable"],
        "device_memory_size": stats["device_memory_size"],
        "device": device,
        "bindings": description["io"],
    }
    stripped = stripped_weights_problem(stats["stripped_weights_size"],
                                        stats["total_weights_size"])
    if stripped:
        report.problems.append(Problem(program_name, "tensorrt.weights_stripped",
                                       f"{_where(delegate)}: the TensorRT plan was {stripped}"))
    mismatch = _binding_mismatch(metadata, description["io"])
    if mismatch:
        report.problems.append(Problem(program_name, "tensorrt.bindings_mismatch",
                                       f"{_where(delegate)}: {mismatch}"))


def check_tensorrt_delegate(delegate: DelegateInfo, ctx: IngestContext) -> DelegateReport:
    report = DelegateReport()
    where = _where(delegate)
    try:
        metadata = _parse(delegate.blob)
    except ImportError as exc:
        report.problems.append(Problem(ctx.program_name, "tensorrt.backend_missing",
                                       f"{where}: the TensorRT backend library is not installed "
                                       f"in this server ({exc})"))
        return report
    except ValueError as exc:
        report.problems.append(Problem(ctx.program_name, "tensorrt.blob_invalid",
                                       f"{where}: the delegate blob is invalid: {exc}"))
        return report
    key = metadata["engine_key"]
    source = ctx.data_file_with(key) if key else None
    report.details.update({
        "engine_source": {"data_file": source, "engine_key": key} if key else "inline",
        "device_id": metadata["device_id"],
        "hardware_compatible": metadata["hardware_compatible"],
        "target_platform": metadata["target_platform"],
        "aliased_io": metadata["aliased_io"],
        "placement": placement_report(ctx.method(delegate.method), delegate, metadata),
    })
    if report.details["placement"].get("hint"):
        report.warnings.append(f"{where}: {report.details['placement']['hint']}")
    if key:
        engine_bytes = ctx.named_data(key)
    else:
        start = metadata["engine_offset"]
        engine_bytes = delegate.blob[start:start + metadata["engine_size"]]
    if engine_bytes is None:
        report.problems.append(Problem(ctx.program_name, "tensorrt.engine_key_missing",
                                       f"{where} needs engine_key {key!r}, which none of the "
                                       f"uploaded .ptd files contains; upload the .ptd file "
                                       f"written by external_engine_data="))
        return report
    provider, ok, reason = _verifier()
    report.details["verified"] = ok
    if ok:
        _verify_engine(provider, engine_bytes, metadata, report, delegate, ctx.program_name)
    elif ctx.allow_unverified_plans:
        report.details.update(runnable=False, unavailable_reason=(
            f"TensorRT plans cannot run on this host: {reason}"))
        report.warnings.append(f"{where}: the TensorRT plan was stored without verification "
                               f"({UNVERIFIED_OPTION} is set): {reason}")
    else:
        report.problems.append(Problem(ctx.program_name, "tensorrt.unverifiable",
                                       f"{where}: this host cannot verify TensorRT plans "
                                       f"({reason}); set {UNVERIFIED_OPTION} to store the model "
                                       f"anyway, not runnable here"))
    return report


register_delegate_check(BACKEND_ID, check_tensorrt_delegate)
