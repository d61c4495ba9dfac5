#include "host_buffer.h"

#include <cstdlib>
#include <string>

using executorch::runtime::Error;

namespace ethost {

void HostPages::operator()(void* p) const {
  if (locked_by) unlock_pages(*locked_by, p, size);
  std::free(p);
}

Outcome<void*> HostBuffer::reserve(size_t nbytes) {
  if (nbytes <= capacity_ && data_) return data_.get();
  size_t rounded = nbytes == 0 ? kHostPage : (nbytes + kHostPage - 1) / kHostPage * kHostPage;
  void* memory = std::aligned_alloc(kHostPage, rounded);
  if (memory == nullptr) {
    return Status(Error::MemoryAllocationFailed,
                  "could not allocate " + std::to_string(nbytes) + " bytes of host memory");
  }
  data_.reset(memory);  // the old pages unlocked (by their own deleter's state) and freed
  data_.get_deleter() = HostPages{};
  capacity_ = rounded;
  lock_tried_ = false;
  return memory;
}

void HostBuffer::lock_for_copies(const std::shared_ptr<ethost_device::DeviceMemory>& memory) {
  if (!data_ || lock_tried_) return;
  lock_tried_ = true;
  if (lock_pages(*memory, data_.get(), capacity_))
    data_.get_deleter() = HostPages{memory, capacity_};
}

}  // namespace ethost
