// The allocator of a front's arena (service/shared/arena.py holds the mapping and the Python face):
// 256-byte aligned slots, first fit over the free extents in address order, coalesced on free.
// One allocator per arena, shared by the Python path and the native path (front_lane.h), both on
// the front's event loop: no lock.
#pragma once

#include "contract_limits.h"

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace etrt_front {

using ethost::limits::kAlignment;

inline uint64_t align_up(uint64_t value) {
  return (value + kAlignment - 1) / kAlignment * kAlignment;
}

struct Slot {
  uint64_t offset = 0;
  uint64_t size = 0;
};

class Slots {
 public:
  // `base`: where the arena is mapped here (freed extents of at least `return_bytes` give their
  // pages back to the kernel unless pinned); null for none.
  Slots(uint64_t size, void* base, uint64_t return_bytes);

  // A slot of at least `nbytes` (one alignment unit for zero); none when no extent fits now.
  std::optional<Slot> allocate(uint64_t nbytes);
  void free(Slot slot);

  uint64_t size() const { return size_; }
  uint64_t in_use() const { return in_use_; }
  std::vector<std::pair<uint64_t, uint64_t>> free_extents() const;
  // The engine pinned the arena: its pages must stay.
  void set_pinned(bool pinned) { pinned_ = pinned; }

 private:
  uint64_t size_;
  void* base_;
  uint64_t return_bytes_;
  bool pinned_ = false;
  uint64_t in_use_ = 0;
  std::map<uint64_t, uint64_t> free_;  // start -> length
};

}  // namespace etrt_front
