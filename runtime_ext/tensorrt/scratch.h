// The shared activation scratch: one device buffer per device memory, grown to the largest
// execution context it served, that contexts created with user-managed memory take in turn.
// Engines then hold the largest context's activation memory between them rather than each its
// own; the price is that their executes on the device run one at a time (the claim is held
// from binding until the stream has drained, since TensorRT uses the memory until the work
// completes). It never shrinks.
#pragma once

#include <cstddef>
#include <mutex>

#include "memory.h"

namespace ethost_trt {

struct ScratchClaim {
  std::unique_lock<std::mutex> lock;  // held while the caller's work may use the buffer
  void* data = nullptr;
  size_t size = 0;
};

// Waits for the buffer of `memory`, grows it to `bytes` if smaller, and holds it.
Outcome<ScratchClaim> claim_shared_scratch(const std::shared_ptr<DeviceMemory>& memory,
                                           size_t bytes);
// Bytes of the shared scratch of the active device memory now (0: none yet).
size_t shared_scratch_bytes(const DeviceMemory* memory);

}  // namespace ethost_trt
