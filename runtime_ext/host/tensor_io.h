// Tensors in and out of a method, in plain C++ (the GIL-free side): an input described for
// Method::set_input, and outputs copied out of planned memory so a later execute cannot change
// arrays the caller already holds. The Python side of both is tensors_module.h.
#pragma once

#include "contract_limits.h"
#include "device_copies.h"
#include "method_spec.h"

#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/exec_aten/util/tensor_dimension_limit.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ethost {

// The numpy name of a scalar type, or ExecuTorch's own name for one outside the dtype table.
const char* dtype_name(executorch::aten::ScalarType type);

// Everything set_input needs, readable without the GIL. The data stays owned by the caller's
// array, which the bindings keep alive until execute returns.
// Fixed arrays rather than vectors: binding an input allocates nothing (this is per call).
constexpr size_t kMaxInputDims = limits::kMaxDims;
static_assert(kMaxInputDims == executorch::runtime::kTensorDimensionLimit,
              "contract_limits.h's kMaxDims is ExecuTorch's dimension limit");

struct InputBinding {
  bool is_tensor = false;
  executorch::aten::ScalarType dtype = executorch::aten::ScalarType::Float;
  size_t ndim = 0;
  std::array<int32_t, kMaxInputDims> sizes{};
  std::array<uint8_t, kMaxInputDims> dim_order{};
  std::array<int32_t, kMaxInputDims> strides{};
  void* data = nullptr;
  // `data` is device memory (device_inputs.h says where such an input goes).
  bool on_device = false;
  executorch::runtime::EValue scalar;
};

// Memory the caller wants an output written into: device memory (device_inputs.h says how it
// gets there) or host memory (the server's arena slot a front answers from, so the output is
// copied once, not into a buffer of ours and again into the slot). A null `data` asks for the
// output back as a host copy, as without destinations.
struct OutputDestination {
  void* data = nullptr;
  size_t nbytes = 0;
  bool on_host = false;
};

struct OutputBuffer {
  bool is_none = false;
  // Written into its destination: shape and dtype only, no bytes.
  bool in_destination = false;
  executorch::aten::ScalarType dtype = executorch::aten::ScalarType::Float;
  std::vector<size_t> shape;
  std::unique_ptr<uint8_t, void (*)(void*)> data{nullptr, nullptr};
};

// Copy of one output value. A tensor in a device buffer is copied through `from_device` (null
// for host memory); the bytes are only there once it has finished.
Outcome<OutputBuffer> copy_output(const executorch::runtime::EValue& value, size_t index,
                                  const std::string& method, DeviceCopies* from_device);

}  // namespace ethost
