#include "slots.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

namespace etrt_front {

Slots::Slots(uint64_t size, void* base, uint64_t return_bytes)
    : size_(size), base_(base), return_bytes_(return_bytes) {
  if (size_ > 0) free_.emplace(0, size_);
}

std::optional<Slot> Slots::allocate(uint64_t nbytes) {
  if (nbytes > size_) return std::nullopt;  // also keeps align_up from wrapping
  uint64_t size = align_up(std::max<uint64_t>(nbytes, 1));
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    Slot slot{it->first, size};
    uint64_t rest = it->second - size;
    free_.erase(it);
    if (rest > 0) free_.emplace(slot.offset + size, rest);
    in_use_ += size;
    return slot;
  }
  return std::nullopt;
}

void Slots::free(Slot slot) {
  in_use_ -= slot.size;
  if (slot.size >= return_bytes_ && !pinned_ && base_ != nullptr) {
    // Resident memory follows the bytes in flight, not the largest request ever seen: the
    // whole pages inside the slot go back.
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    uint64_t first = (slot.offset + page - 1) / page * page;
    uint64_t last = (slot.offset + slot.size) / page * page;
    if (last > first) madvise(static_cast<char*>(base_) + first, last - first, MADV_REMOVE);
  }
  uint64_t start = slot.offset, length = slot.size;
  auto after = free_.lower_bound(start);
  if (after != free_.begin()) {
    auto before = std::prev(after);
    if (before->first + before->second == start) {
      start = before->first;
      length += before->second;
      free_.erase(before);
    }
  }
  if (after != free_.end() && start + length == after->first) {
    length += after->second;
    free_.erase(after);
  }
  free_.emplace(start, length);
}

std::vector<std::pair<uint64_t, uint64_t>> Slots::free_extents() const {
  return {free_.begin(), free_.end()};
}

}  // namespace etrt_front
