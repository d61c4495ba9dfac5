// Exports the constants both languages share (contract_limits.h, and the lane messages' tags
// and fixed sizes from wire.h) as attributes of a native module. Both modules call this, so the
// front (etrt_front) and the engine (ethost) read one definition; service/shared/limits.py and
// service/shared/lane_frames.py take their values from here.
#pragma once

#include "contract_limits.h"
#include "wire.h"

#include <nanobind/nanobind.h>

namespace ethost {

inline void export_contract_constants(nanobind::module_& m) {
  m.attr("MAX_INPUTS") = limits::kMaxInputs;
  m.attr("MAX_DIMS") = limits::kMaxDims;
  m.attr("MAX_OUTPUTS") = limits::kMaxOutputs;
  m.attr("MAX_DIM") = limits::kMaxDim;
  m.attr("ALIGNMENT") = limits::kAlignment;
  m.attr("LANE_INFER_TAG") = lane::kInferTag;
  m.attr("LANE_DONE_TAG") = lane::kDoneTag;
  m.attr("LANE_CANCEL_TAG") = lane::kCancelTag;
  m.attr("LANE_CANCEL_SIZE") = lane::kCancelSize;
  m.attr("LANE_REQUEST_HEAD") = lane::kRequestHead;
  m.attr("LANE_INPUT_HEAD") = lane::kInputHead;
  m.attr("LANE_ANSWER_HEAD") = lane::kAnswerHead;
  m.attr("LANE_OUTPUT_HEAD") = lane::kOutputHead;
  m.attr("LANE_SHM_REF_HEAD") = lane::kShmRefHead;
  m.attr("LANE_MAX_SHM_REFS") = lane::kMaxShmRefs;
  m.attr("LANE_IN_REGION") = lane::kInRegion;
}

}  // namespace ethost
