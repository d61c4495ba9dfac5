// Moving tensors across the Python boundary: caller arrays in (numpy, buffer protocol, DLPack)
// checked against the method's signature, and outputs copied out of planned memory so a later
// execute cannot change arrays the caller already holds.
#pragma once

#include "device_copies.h"
#include "method_spec.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <executorch/runtime/core/evalue.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ethost {

// nanobind makes C-contiguous host copies of strided inputs itself; dtype is checked by us so a
// mismatch is reported instead of silently converted.
using InputArray = nanobind::ndarray<nanobind::ro, nanobind::c_contig, nanobind::device::cpu>;

// Keeps a caller's input alive until execute returns: either a buffer-protocol view (the fast
// path for numpy arrays: no DLPack capsule, no wrapper objects) or a nanobind array (DLPack
// objects such as torch tensors, and strided inputs nanobind copies). Destroy with the GIL held.
class HeldInput {
 public:
  explicit HeldInput(InputArray array) : array_(std::move(array)) {}
  explicit HeldInput(const Py_buffer& view) : view_(view), has_view_(true) {}
  HeldInput(HeldInput&& other) noexcept
      : array_(std::move(other.array_)), view_(other.view_), has_view_(other.has_view_) {
    other.has_view_ = false;
  }
  HeldInput(const HeldInput&) = delete;
  HeldInput& operator=(const HeldInput&) = delete;
  HeldInput& operator=(HeldInput&&) = delete;
  ~HeldInput() {
    if (has_view_) PyBuffer_Release(&view_);
  }

 private:
  InputArray array_;
  Py_buffer view_{};
  bool has_view_ = false;
};

const char* dtype_name(executorch::aten::ScalarType type);

// Everything set_input needs, readable without the GIL. The data stays owned by the caller's
// array, which the caller keeps alive in `HeldInput`s until execute returns.
// Fixed arrays rather than vectors: binding an input allocates nothing (this is per call).
constexpr size_t kMaxInputDims = 16;  // ExecuTorch's kTensorDimensionLimit

struct InputBinding {
  bool is_tensor = false;
  executorch::aten::ScalarType dtype = executorch::aten::ScalarType::Float;
  size_t ndim = 0;
  std::array<int32_t, kMaxInputDims> sizes{};
  std::array<uint8_t, kMaxInputDims> dim_order{};
  std::array<int32_t, kMaxInputDims> strides{};
  void* data = nullptr;
  executorch::runtime::EValue scalar;
};

// Needs the GIL. Refuses (InputError) anything that does not match `spec`.
Outcome<InputBinding> bind_input(nanobind::handle value, const TensorSpec& spec,
                                 std::vector<HeldInput>& keep_alive);

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
