// Moving tensors across the Python boundary: caller arrays in (numpy, buffer protocol, DLPack)
// checked against the method's signature, and copied outputs out as numpy arrays.
#pragma once

#include "tensor_io.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

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

// Needs the GIL. Refuses (an Input status) anything that does not match `spec`.
Outcome<InputBinding> bind_input(nanobind::handle value, const TensorSpec& spec,
                                 std::vector<HeldInput>& keep_alive);

// Needs the GIL. None, an object with __cuda_array_interface__ (device memory the output is
// written into: its address and size; its shape and dtype are not the output's own), or a
// writable C-contiguous host buffer (read the same way: its address and byte size).
Outcome<OutputDestination> bind_output_destination(nanobind::handle value, const TensorSpec& spec);

// What execute returns for an output written into its destination: no bytes, only what the
// caller needs to describe them (ethost.WrittenOutput).
struct WrittenOutput {
  nanobind::tuple shape;
  nanobind::object dtype;  // numpy's (a uint16 carrier for bfloat16)
  size_t nbytes = 0;
};

// Needs the GIL; the numpy array takes ownership of the copied bytes. An output written into
// its destination becomes a WrittenOutput.
nanobind::object to_numpy(OutputBuffer&& output);

}  // namespace ethost
