"""Ingest check for TensorRT delegates.

A TensorRT plan is opaque to every generic rule, and the worst ways it can fail do not fail: a
plan saved without its weights runs with placeholder weights, and a delegate buffer off a 256-byte
boundary costs a copy on every call. So each engine is deserialized, with the TensorRT runtime
that would serve it, before the upload is accepted, and what was found is recorded in the model's
description. Deserializing runs TensorRT on uploaded bytes, which can crash or hang: it happens
in the isolated check child (verify_engine, as ingest IsolatedWork), never in the server, which
only reads the blob with our own bounded parser and applies the rules to the child's answer.
Where no TensorRT runtime or CUDA device exists, nothing about the plans can be verified, so
such uploads are refused unless the operator explicitly allows storing them unverified
(ETRT_ALLOW_UNVERIFIED_PLANS=1 / --allow-unverified-plans); they are then kept but not runnable
on this host.
"""

from __future__ import annotations

import hashlib

from service import rules
from service.backends.tensorrt import cuda_driver
from service.backends.tensorrt import runtime as tensorrt_runtime
from service.backends.tensorrt.mismatch import refusal_message
from service.errors import Problem, clip
from service.ingest.delegates import DelegateReport, IngestContext, IsolatedWork
from service.ingest.inspection import DelegateInfo, MethodInfo

ALIGNMENT = tensorrt_runtime.ADDRESS_ALIGNMENT
STRIPPED_HINT = "saved without its weights; re-export with strip_engine_weights=False"
PLANNING_HINT = (
    "re-export with 256-byte memory planning (ExecutorchBackendConfig("
    "memory_planning_pass=MemoryPlanningPass(alignment=256)))"
)
UNVERIFIED_OPTION = "ETRT_ALLOW_UNVERIFIED_PLANS=1 (--allow-unverified-plans)"
# The rule of each fault the delegate's blob reader names (ethost_tensorrt.blob_faults(): the
# reader decides, this only names; tests/unit/test_blob_rules.py fails when the two drift).
BLOB_FAULT_RULES = {
    "blob_invalid": rules.TENSORRT_BLOB_INVALID,
    "duplicate_binding": rules.TENSORRT_DUPLICATE_BINDING,
    "alias_binding": rules.TENSORRT_ALIAS_BINDING,
    "alias_repeated": rules.TENSORRT_ALIAS_REPEATED,
    "alias_kind": rules.TENSORRT_ALIAS_KIND,
    "engine_and_key": rules.TENSORRT_ENGINE_AND_KEY,
}


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
    for value, (name, is_input) in zip(
        delegate.call_args, _argument_bindings(metadata, len(delegate.call_args))
    ):
        tensor = method.tensors.get(value)
        if tensor is None:
            continue
        entry = {
            "binding": name,
            "is_input": is_input,
            "value": value,
            "memory_id": tensor.memory_id,
            "offset": tensor.memory_offset,
            "memory": method.planned_buffer_devices.get(tensor.memory_id, "cpu"),
        }
        if tensor.memory_offset is None:
            entry["aligned"] = None
        else:
            entry["aligned"] = tensor.memory_offset % ALIGNMENT == 0
            if not entry["aligned"]:
                copies += 2 if is_input and name in updated_in_place else 1
        buffers.append(entry)
    report = {
        "buffers": buffers,
        "expected_staging_copies_per_call": copies,
        "host_memory_buffers": sum(
            1 for b in buffers if b["aligned"] is not None and b["memory"] == "cpu"
        ),
    }
    if copies:
        unaligned = [
            b["binding"] or f"argument value {b['value']}" for b in buffers if b["aligned"] is False
        ]
        report["hint"] = (
            f"{len(unaligned)} planned buffer(s) ({', '.join(unaligned)}) are not "
            f"on a {ALIGNMENT}-byte boundary and are copied on every call; "
            f"{PLANNING_HINT}"
        )
    return report


def _parse(blob: bytes) -> dict:
    """The backend's own blob reader, so ingest accepts and refuses exactly what it would load.

    Imported here, not at module import: the service imports the checks before it runs the
    backend setup that loads this library into the native host.
    """
    import ethost_tensorrt

    return ethost_tensorrt.parse_blob(blob)


def _binding_mismatch(metadata: dict, engine_io: list[dict]) -> str | None:
    """Upstream's delegate refuses a blob whose binding count is not the engine's I/O count as
    damaged; names and directions must match too, or the delegate binds the wrong buffers."""
    declared = {b["name"]: bool(b["is_input"]) for b in metadata["io_bindings"]}
    actual = {t["name"]: t["is_input"] for t in engine_io}
    if declared == actual:
        return None
    count = ""
    if len(declared) != len(actual):
        count = (
            f"the blob names {len(declared)} bindings, the engine has {len(actual)} I/O tensors; "
        )
    differing = sorted(
        n for n in declared.keys() | actual.keys() if declared.get(n) != actual.get(n)
    )
    return (
        f"{count}binding(s) {', '.join(map(repr, differing))} differ: the blob's io_bindings "
        f"{sorted(declared)} do not match the engine's I/O tensors {sorted(actual)} "
        "(names and directions must be the same)"
    )


def _shape_tensor_inputs(engine_io: list[dict]) -> list[str]:
    return [t["name"] for t in engine_io if t["is_input"] and t.get("shape_tensor")]


def _availability() -> tuple[bool, str]:
    """Whether plans can be verified here, and why not: with the provider the backend will serve
    with, which is the shipped TensorRT one unless another was installed by the backend setup (the
    test engine provider in CI), which is then trusted to refuse by itself what it cannot load.
    The isolated child runs the same backend setup, so it verifies with that same provider."""
    import ethost_tensorrt

    installed = ethost_tensorrt.engine_provider()
    if installed is None or isinstance(installed, tensorrt_runtime.TensorRTEngineProvider):
        return tensorrt_runtime.availability()
    return True, ""


class _HandOver:
    """The provider in the check child once verify_engine ran: the delegate that loads a method
    after the checks gets the engine verify_engine deserialized from the same plan bytes, so an
    upload's plans are deserialized once. Everything else goes to the installed provider."""

    def __init__(self, provider):
        self.provider = provider
        self._verified: dict[tuple[str, int], object] = {}

    def keep(self, plan: bytes, device_id: int, engine) -> None:
        self._verified[(hashlib.sha256(plan).hexdigest(), device_id)] = engine

    def deserialize(self, plan: bytes, device_id: int):
        engine = self._verified.pop((hashlib.sha256(plan).hexdigest(), device_id), None)
        return engine if engine is not None else self.provider.deserialize(plan, device_id)

    def __getattr__(self, name: str):
        return getattr(self.provider, name)


def _provider_version(provider) -> str | None:
    """The TensorRT release the provider deserializes with: its own `tensorrt_version` where it
    has one (a provider bringing its own TensorRT), else that of the runtime module here."""
    version = getattr(provider, "tensorrt_version", None)
    return str(version) if version else tensorrt_runtime.tensorrt_version()


def verify_engine(request: dict) -> dict:
    """Runs in the isolated check child only: deserializes one plan and describes it."""
    import ethost_tensorrt

    installed = ethost_tensorrt.engine_provider()
    if installed is not None and not isinstance(installed, _HandOver):
        installed = _HandOver(installed)
        ethost_tensorrt.set_engine_provider(installed)
    provider = (
        installed.provider if installed is not None else tensorrt_runtime.TensorRTEngineProvider()
    )
    device = request["device_id"]
    if not 0 <= device < cuda_driver.device_count():
        device = 0
    with open(request["file"], "rb") as source:
        source.seek(request["offset"])
        plan = source.read(request["size"])
    try:
        engine = provider.deserialize(plan, device)
        description = provider.describe(engine)
    except Exception as exc:  # providers raise whatever they raise, always with a reason
        return {"invalid": str(exc), "tensorrt_version": _provider_version(provider)}
    if installed is not None:
        installed.keep(plan, device, engine)
    return {
        "device": device,
        "stats": description["stats"],
        "io": description["io"],
        # Which engine it is: the server shares one engine per identical plan (admission).
        "plan_sha256": hashlib.sha256(plan).hexdigest(),
    }


def _apply_verification(
    answer: dict, metadata: dict, report: DelegateReport, delegate: DelegateInfo, program_name: str
) -> None:
    if "invalid" in answer:
        rule, message = refusal_message(answer["invalid"], answer.get("tensorrt_version"), metadata)
        report.problems.append(Problem(program_name, rule, f"{delegate.where}: {message}"))
        return
    stats = answer["stats"]
    report.details["engine"] = {
        "weight_bytes": stats["total_weights_size"],
        "stripped_weights_size": stats["stripped_weights_size"],
        "refittable": stats["refittable"],
        "device_memory_size": stats["device_memory_size"],
        "streamable_weights_size": stats.get("streamable_weights_size", 0),
        "plan_sha256": answer["plan_sha256"],
        "device": answer["device"],
        "bindings": answer["io"],
    }
    stripped = stripped_weights_problem(stats["stripped_weights_size"], stats["total_weights_size"])
    if stripped:
        report.problems.append(
            Problem(
                program_name,
                rules.TENSORRT_WEIGHTS_STRIPPED,
                f"{delegate.where}: the TensorRT plan was {stripped}",
            )
        )
    mismatch = _binding_mismatch(metadata, answer["io"])
    if mismatch:
        report.problems.append(
            Problem(
                program_name,
                rules.TENSORRT_BINDINGS_MISMATCH,
                f"{clip(program_name)!r} {delegate.where}: {mismatch}",
            )
        )
    for name in _shape_tensor_inputs(answer["io"]):
        report.problems.append(
            Problem(
                program_name,
                rules.TENSORRT_SHAPE_TENSOR_INPUT,
                f"{clip(program_name)!r} {delegate.where}: binding {name!r} is a shape-tensor "
                "input (TensorRT needs its values to infer shapes), which the delegate cannot "
                "feed; re-export with that value static or as an execution-tensor input",
            )
        )


def _engine_span(
    delegate: DelegateInfo, metadata: dict, ctx: IngestContext
) -> tuple[str, int, int] | None:
    """(file, offset, size) of the plan: inline in the program's blob, or a .ptd entry."""
    key = metadata["engine_key"]
    if not key:
        return (
            str(ctx.program_path),
            delegate.blob_offset + metadata["engine_offset"],
            metadata["engine_size"],
        )
    span = ctx.named_data_span(key)
    return None if span is None else (str(span[0]), span[1], span[2] - span[1])


def check_tensorrt_delegate(delegate: DelegateInfo, ctx: IngestContext) -> DelegateReport:
    report = DelegateReport()
    where = delegate.where
    try:
        metadata = _parse(delegate.blob)
    except ImportError as exc:
        report.problems.append(
            Problem(
                ctx.program_name,
                rules.TENSORRT_BACKEND_MISSING,
                f"{where}: the TensorRT backend library is not installed in this server ({exc})",
            )
        )
        return report
    except ValueError as exc:
        binding = getattr(exc, "binding", None)
        about = f" (binding {binding!r})" if binding else ""
        report.problems.append(
            Problem(
                ctx.program_name,
                BLOB_FAULT_RULES[getattr(exc, "fault", "blob_invalid")],
                f"{clip(ctx.program_name)!r} {where}{about}: the delegate blob is invalid: {exc}",
            )
        )
        return report
    key = metadata["engine_key"]
    source = ctx.data_file_with(key) if key else None
    report.details.update(
        {
            "engine_source": {"data_file": source, "engine_key": key} if key else "inline",
            "device_id": metadata["device_id"],
            "hardware_compatible": metadata["hardware_compatible"],
            "target_platform": metadata["target_platform"],
            "aliased_io": metadata["aliased_io"],
            "placement": placement_report(ctx.method(delegate.method), delegate, metadata),
        }
    )
    if report.details["placement"].get("hint"):
        report.warnings.append(f"{where}: {report.details['placement']['hint']}")
    engine = _engine_span(delegate, metadata, ctx)
    if engine is None:
        report.problems.append(
            Problem(
                ctx.program_name,
                rules.TENSORRT_ENGINE_KEY_MISSING,
                f"{where} needs engine_key {key!r}, which none of the "
                f"uploaded .ptd files contains; upload the .ptd file "
                f"written by external_engine_data=",
            )
        )
        return report
    ok, reason = _availability()
    report.details["verified"] = ok
    if ok:
        file, offset, size = engine
        report.isolated = IsolatedWork(
            "service.backends.tensorrt.checks:verify_engine",
            {"file": file, "offset": offset, "size": size, "device_id": metadata["device_id"]},
            lambda answer: _apply_verification(
                answer, metadata, report, delegate, ctx.program_name
            ),
            "deserializing the TensorRT plan",
        )
    elif ctx.allow_unverified_plans:
        report.details.update(
            runnable=False, unavailable_reason=(f"TensorRT plans cannot run on this host: {reason}")
        )
        report.warnings.append(
            f"{where}: the TensorRT plan was stored without verification "
            f"({UNVERIFIED_OPTION} is set): {reason}"
        )
    else:
        report.problems.append(
            Problem(
                ctx.program_name,
                rules.TENSORRT_UNVERIFIABLE,
                f"{where}: this host cannot verify TensorRT plans "
                f"({reason}); set {UNVERIFIED_OPTION} to store the model "
                f"anyway, not runnable here",
            )
        )
    return report
