"""The constants fronts and engine, C++ and Python, must agree on have one definition
(runtime_ext/common/contract_limits.h and the lane's wire.h), which both native modules export
and the Python side reads: these tests fail when a second copy appears in either language, when
the two modules were built from different definitions, or when the Python struct layouts of the
lane's messages no longer match the sizes wire.h states."""

import re
from pathlib import Path

import ethost
import etrt_front

from service.backends.tensorrt import runtime as tensorrt_runtime
from service.front.protocols import json_tensors
from service.shared import arena, lane_frames, limits

REPO = Path(__file__).resolve().parents[2]
SHARED = (
    "MAX_INPUTS",
    "MAX_DIMS",
    "MAX_OUTPUTS",
    "MAX_DIM",
    "ALIGNMENT",
    "LANE_INFER_TAG",
    "LANE_DONE_TAG",
    "LANE_REQUEST_HEAD",
    "LANE_INPUT_HEAD",
    "LANE_ANSWER_HEAD",
    "LANE_OUTPUT_HEAD",
    "LANE_SHM_REF_HEAD",
    "LANE_MAX_SHM_REFS",
    "LANE_IN_REGION",
)
# The C++ names and the one header each may be defined in.
CPP_HOMES = {
    "kMaxInputs": "common/contract_limits.h",
    "kMaxDims": "common/contract_limits.h",
    "kMaxOutputs": "common/contract_limits.h",
    "kMaxDim": "common/contract_limits.h",
    "kAlignment": "common/contract_limits.h",
    "kInferTag": "lane/wire.h",
    "kDoneTag": "lane/wire.h",
    "kRequestHead": "lane/wire.h",
    "kInputHead": "lane/wire.h",
    "kAnswerHead": "lane/wire.h",
    "kOutputHead": "lane/wire.h",
    "kShmRefHead": "lane/wire.h",
    "kMaxShmRefs": "lane/wire.h",
    "kInRegion": "lane/wire.h",
}
PY_NAMES = ("MAX_INPUTS", "MAX_DIMS", "MAX_OUTPUTS", "MAX_DIM", "ALIGNMENT", "ADDRESS_ALIGNMENT")
PY_NAMES += ("INFER_TAG", "DONE_TAG")


def test_both_native_modules_export_the_same_constants():
    for name in SHARED:
        assert getattr(etrt_front, name) == getattr(ethost, name), name
    assert (etrt_front.MAX_INPUTS, etrt_front.MAX_DIMS, etrt_front.MAX_OUTPUTS) == (16, 16, 64)
    assert etrt_front.ALIGNMENT == 256 and etrt_front.MAX_DIM == 2**31 - 1


def test_python_reads_the_exported_values():
    assert (limits.MAX_INPUTS, limits.MAX_DIMS, limits.MAX_OUTPUTS) == (
        etrt_front.MAX_INPUTS,
        etrt_front.MAX_DIMS,
        etrt_front.MAX_OUTPUTS,
    )
    assert arena.ALIGNMENT == tensorrt_runtime.ADDRESS_ALIGNMENT == etrt_front.ALIGNMENT
    assert (json_tensors.MAX_DIMS, json_tensors.MAX_DIM) == (
        etrt_front.MAX_DIMS,
        etrt_front.MAX_DIM,
    )
    assert (lane_frames.INFER_TAG, lane_frames.DONE_TAG) == (
        etrt_front.LANE_INFER_TAG,
        etrt_front.LANE_DONE_TAG,
    )


def test_lane_frames_layout_matches_wire_h():
    """The Python encoder's fixed parts have the sizes wire.h gives (the C++ reader's offsets),
    and a request it writes is exactly as long as those sizes say."""
    assert lane_frames._REQUEST.size == etrt_front.LANE_REQUEST_HEAD
    assert lane_frames._INPUT.size == etrt_front.LANE_INPUT_HEAD
    assert lane_frames._ANSWER.size == etrt_front.LANE_ANSWER_HEAD
    assert lane_frames._OUTPUT.size == etrt_front.LANE_OUTPUT_HEAD
    payload = lane_frames.request(1, 2, 3, 4096, 512, 1, [(256, (2, 4)), (512, ())])
    heads = etrt_front.LANE_REQUEST_HEAD + 2 * etrt_front.LANE_INPUT_HEAD
    assert len(payload) == heads + 8 * 2
    assert lane_frames.read_request(payload)[6] == [(256, (2, 4)), (512, ())]
    # Shared memory references: their fixed part, then the region's name (UTF-8).
    assert lane_frames._REF.size == etrt_front.LANE_SHM_REF_HEAD
    refs = [(0, False, "région", 512, 32), (2, True, "out", 0, 64)]
    payload = lane_frames.request(1, 2, 3, 4096, 512, 0b101, [(0, (2, 4))], refs)
    named = len("région".encode()) + len("out")
    heads = etrt_front.LANE_REQUEST_HEAD + etrt_front.LANE_INPUT_HEAD + 8 * 2
    assert len(payload) == heads + 2 * etrt_front.LANE_SHM_REF_HEAD + named
    assert lane_frames.read_request(payload)[7] == refs
    assert lane_frames.IN_REGION == etrt_front.LANE_IN_REGION == 2**64 - 1


def test_no_second_copy_in_cpp():
    defined = re.compile(r"constexpr\s+[\w:]+\s+(k\w+)\s*=")
    for path in sorted((REPO / "runtime_ext").rglob("*")):
        if path.suffix not in (".h", ".cpp"):
            continue
        where = str(path.relative_to(REPO / "runtime_ext"))
        for name in defined.findall(path.read_text()):
            home = CPP_HOMES.get(name)
            assert home is None or home == where, f"{where} defines {name} again (see {home})"


def test_no_second_copy_in_python():
    assigned = re.compile(r"^\s*(\w+)\s*(?::[^=\n]*)?=\s*(?:\d|0x|2\s*\*\*)", re.MULTILINE)
    for path in sorted((REPO / "service").rglob("*.py")):
        for name in assigned.findall(path.read_text()):
            where = path.relative_to(REPO)
            assert name not in PY_NAMES, f"{where} gives {name} a value of its own"
