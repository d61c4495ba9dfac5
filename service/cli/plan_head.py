"""What a program's TensorRT blobs record, read without TensorRT, for reports made offline.

The blob is parsed by the native backend's own reader (as the server's ingest check does); of
the plan only its first four bytes are read: TensorRT plans start with the magic `ftrt`, and
anything else is not a plan TensorRT will deserialize.
"""

from __future__ import annotations

from service.backends.tensorrt import BACKEND_ID
from service.ingest.inspection import InspectionError, inspect_data_file, inspect_program
from service.ingest.staging import StagedUpload

PLAN_MAGIC = b"ftrt"
RECORDED = ("target_platform", "hardware_compatible", "device_id")


def _plan_span(delegate, metadata: dict, upload: StagedUpload, data_infos: dict):
    key = metadata["engine_key"]
    if not key:
        start = delegate.blob_offset + metadata["engine_offset"]
        return upload.program.path, start, metadata["engine_size"]
    for staged in upload.data:
        info = data_infos.get(staged.name)
        if info is not None and key in info.keys:
            start, end = info.span(key)
            return staged.path, start, end - start
    return None


def recorded_plans(upload: StagedUpload) -> dict:
    """(method, delegate index) -> what its TensorRT blob and plan head record."""
    try:
        import ethost_tensorrt

        program = inspect_program(upload.program.path)
    except (ImportError, InspectionError):
        return {}
    data_infos = {}
    for staged in upload.data:
        try:
            data_infos[staged.name] = inspect_data_file(staged.path)
        except InspectionError:
            continue
    plans = {}
    for method in program.methods:
        for delegate in method.delegates:
            if delegate.backend_id != BACKEND_ID:
                continue
            try:
                metadata = ethost_tensorrt.parse_blob(delegate.blob)
            except ValueError:
                continue
            entry = {
                "backend": delegate.backend_id,
                "recorded": {key: metadata.get(key) for key in RECORDED},
            }
            span = _plan_span(delegate, metadata, upload, data_infos)
            if span is not None:
                path, start, size = span
                with open(path, "rb") as source:
                    source.seek(start)
                    head = source.read(min(4, size))
                entry["plan_bytes"] = size
                entry["plan_magic"] = head.decode("latin-1")
                entry["tensorrt_plan"] = head == PLAN_MAGIC
            plans[(method.name, delegate.index)] = entry
    return plans
