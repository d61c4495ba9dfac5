// Moving tensors across the Python boundary: caller arrays in (numpy, buffer protocol, DLPack)
// checked against the method's signature, and outputs copied out of planned memory so a later
// execute cannot change arrays the caller already holds.
#pragma once

#include "device_copies.h"
#include "method_spec.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <executorch/runtime/core/evalue.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ethost {

// nanobind makes C-contiguous host copies of strided inputs itself; dtype is checked by us so a
// mismatch is reported instead of silently converted.
using InputArray = nanobind::ndarray<nanobind::ro, nanobind::c_contig, nanobind::device::cpu>;

const char* dtype_name(executorch::aten::ScalarType type);

// Everything set_input needs, readable without the GIL. The data stays owned by the caller's
// array, which the caller keeps alive in `InputArray`s until execute returns.
struct InputBinding {
  bool is_tensor = false;
  executorch::aten::ScalarType dtype = executorch::aten::ScalarType::Float;
  std::vector<int32_t> sizes;
  std::vector<uint8_t> dim_order;
  std::vector<int32_t> strides;
  void* data = nullptr;
  executorch::runtime::EValue scalar;
};

// Needs the GIL. Refuses (InputError) anything that does not match `spec`.
Outcome<InputBinding> bind_input(nanobind::handle value, const TensorSpec& spec,
                                 std::vector<InputArray>& keep_alive);

struct OutputBuffer {
  bool is_none = false;
  executorch::aten::ScalarType dtype = executorch::aten::ScalarType::Float;
  std::vector<size_t> shape;
  std::unique_ptr<uint8_t, void (*)(void*)> data{nullptr, nullptr};
};

// GIL-free copy of one output value. A tensor in a device buffer is copied through
// `from_device` (null for host memory); the bytes are only there once it has finished.
Outcome<OutputBuffer> copy_output(const executorch::runtime::EValue& value, size_t index,
                                  const std::string& method, DeviceCopies* from_device);

// Needs the GIL; the numpy array takes ownership of the copied bytes.
nanobind::object to_numpy(OutputBuffer&& output);

}  // namespace ethost
