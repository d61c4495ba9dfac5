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
#include <optional>
#include <vector>

namespace ethost {

constexpr size_t kArenaAlignment = 256;
// Host buffers are allocated in whole pages, so that page-locking one (pin_for_copies) locks
// nothing another allocation owns: CUDA refuses to register a page twice.
constexpr size_t kHostPage = 4096;
// The largest planned host buffer pin_for_copies page-locks; larger ones stay pageable, so a
// large model's activations never take that much unswappable memory.
constexpr size_t kMaxPinnedBuffer = size_t{256} << 20;

// Host buffers (planned ones, and instances' own: host_buffer.h) page-locked since the process
// started, those the driver refused, and the bytes locked now (buffers of instances since closed
// are unlocked).
struct PinnedCounts {
  uint64_t pinned = 0, refused = 0, locked_bytes = 0;
};
PinnedCounts pinned_counts();

// Page-locks the whole pages from `p` (page-aligned) holding `size` bytes, for copies between
// them and `memory`'s device, counted in pinned_counts. False, and left pageable, where the driver
// refuses (counted) or where `size` is over kMaxPinnedBuffer (not asked).
bool lock_pages(ethost_device::DeviceMemory& memory, void* p, size_t size);
// Undoes lock_pages; before the pages are freed, since a freed page must not stay registered.
void unlock_pages(ethost_device::DeviceMemory& memory, void* p, size_t size);

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
  // Page-locks, once, the planned host buffer holding `p`, for copies between it and device
  // memory (device_inputs.h: a CUDA input copied into a planned input, a planned output copied
  // into a CUDA destination). From pageable memory the driver stages every such copy through
  // the CPU, one at a time per process (5.6 GB/s for 602 KB images on the H200); from locked
  // memory it is a DMA transfer that the instances' streams run side by side. Only buffers a
  // device copy touches are locked (a CPU-only server locks nothing), up to kMaxPinnedBuffer
  // each; a refusal leaves the buffer pageable for good, and its copies still work.
  void pin_for_copies(const void* p, const std::shared_ptr<ethost_device::DeviceMemory>& memory);
  ~PlannedArenas();
  PlannedArenas(const PlannedArenas&) = delete;
  PlannedArenas& operator=(const PlannedArenas&) = delete;

 private:
  // The buffer `p` points into, if any.
  std::optional<size_t> holding(const void* p) const;
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
  // Per buffer: 0 not tried, 1 locked (by pinned_by_), 2 left pageable.
  std::vector<uint8_t> pin_state_;
  std::shared_ptr<ethost_device::DeviceMemory> pinned_by_;
};

}  // namespace ethost
