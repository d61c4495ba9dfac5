// Host memory an instance keeps for a tensor the plan leaves out: a device input that CPU kernels
// read (copied there from the device), or an output left out of planning that a CPU kernel
// writes (copied from there into a device destination).
#pragma once

#include "arenas.h"
#include "status.h"

#include <device_memory.h>

#include <cstddef>
#include <memory>

namespace ethost {

// Frees a HostBuffer's pages, unlocking them first where they were locked.
struct HostPages {
  std::shared_ptr<ethost_device::DeviceMemory> locked_by;
  size_t size = 0;
  void operator()(void* p) const;
};

// Whole pages (so that locking them locks nothing another allocation owns), growing to the
// largest size asked of it. Page-locked on its first copy to or from the device, as planned host
// buffers are (arenas.h: a copy from pageable memory is staged through the CPU, one at a time
// per process); a refusal leaves that allocation pageable, and its copies still work.
class HostBuffer {
 public:
  Outcome<void*> reserve(size_t nbytes);
  // Called before each copy between this buffer and `memory`'s device: locks once per allocation.
  void lock_for_copies(const std::shared_ptr<ethost_device::DeviceMemory>& memory);
  bool holds(const void* p) const { return p != nullptr && p == data_.get(); }

 private:
  std::unique_ptr<void, HostPages> data_;
  size_t capacity_ = 0;
  bool lock_tried_ = false;
};

}  // namespace ethost
