// The limits the fronts and the engine, C++ and Python, must agree on, defined once here.
// Both native modules export them (etrt_front and ethost: MAX_INPUTS, MAX_DIMS, MAX_OUTPUTS,
// MAX_DIM, ALIGNMENT) and the Python side reads them from there (service/shared/limits.py), so no
// second copy can drift; tests/unit/test_contract_constants.py fails if one appears.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ethost::limits {

// Inputs one lane request carries (the request's u8 count leaves room; this is the budget).
constexpr size_t kMaxInputs = 16;
// Dimensions of a tensor: ExecuTorch's kTensorDimensionLimit (checked where its headers are).
constexpr size_t kMaxDims = 16;
// Outputs of a method a lane request may ask for: the width of the outputs-asked mask.
constexpr size_t kMaxOutputs = 64;
// The largest one dimension a request may give (a dimension is an int32 in ExecuTorch).
constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;
// Every slot of a front's arena and every tensor placed in it starts on this boundary: the one
// TensorRT needs for every buffer it is given, so no request tensor needs a staging copy.
constexpr uint64_t kAlignment = 256;

static_assert((kAlignment & (kAlignment - 1)) == 0, "the alignment is a power of two");

// `value` rounded up to the boundary.
constexpr uint64_t align_up(uint64_t value) {
  return (value + kAlignment - 1) / kAlignment * kAlignment;
}
static_assert(kMaxOutputs <= 64, "the outputs-asked mask is a u64");

}  // namespace ethost::limits
