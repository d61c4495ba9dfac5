// Planned-memory arenas of one Method instance. TensorRT needs every planned tensor 256-byte
// aligned; the plan only guarantees offsets, so the arena bases must be 256-aligned too. A
// buffer the program plans in CUDA memory is allocated through the device-memory seam (cudaMalloc
// aligns to 256), so a delegate gets its tensors already on the device.
#pragma once

#include "status.h"

#include <device_memory.h>

#include <executorch/runtime/core/hierarchical_allocator.h>
#include <executorch/runtime/executor/method_meta.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ethost {

constexpr size_t kArenaAlignment = 256;

struct ArenaFree {
  ethost_device::DeviceMemory* device = nullptr;  // null: host memory from aligned_alloc
  void operator()(uint8_t* p) const;
};

class PlannedArenas {
 public:
  // `path` only names the program in errors.
  static Outcome<std::unique_ptr<PlannedArenas>> allocate(
      const executorch::runtime::MethodMeta& meta, const std::string& path);

  executorch::runtime::HierarchicalAllocator* allocator() { return &allocator_; }
  std::vector<uintptr_t> addresses() const;
  // The memory the device buffers came from; null when every buffer is host memory.
  const std::shared_ptr<ethost_device::DeviceMemory>& device_memory() const { return device_; }
  // Whether `p` points into a buffer planned in device memory (the CPU must not touch it).
  bool on_device(const void* p) const;

 private:
  PlannedArenas(std::shared_ptr<ethost_device::DeviceMemory> device,
                std::vector<std::unique_ptr<uint8_t, ArenaFree>> buffers,
                std::vector<executorch::runtime::Span<uint8_t>> spans,
                std::vector<executorch::runtime::etensor::Device> devices);

  // Declared first so it outlives the buffers it frees.
  std::shared_ptr<ethost_device::DeviceMemory> device_;
  std::vector<std::unique_ptr<uint8_t, ArenaFree>> buffers_;
  std::vector<executorch::runtime::Span<uint8_t>> spans_;
  std::vector<executorch::runtime::etensor::Device> devices_;
  executorch::runtime::HierarchicalAllocator allocator_;
};

}  // namespace ethost
