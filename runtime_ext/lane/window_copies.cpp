#include "window_copies.h"

#include "contract_limits.h"
#include "device_copies.h"

#include <cstring>
#include <memory>
#include <vector>

namespace ethost::lane {
namespace {

// This thread's copies into CUDA regions' windows, on the device memory executes use now (its
// own stream).
Outcome<DeviceCopies*> device_copies() {
  thread_local std::unique_ptr<DeviceCopies> copies;
  auto memory = ethost_device::active_memory();
  if (!memory.ok()) return memory.take_status();
  if (copies == nullptr || &copies->memory() != memory.value().get()) {
    ETHOST_ASSIGN_OR_RETURN(copies, DeviceCopies::create(memory.take(), "the engine's lane"));
  }
  return copies.get();
}

// This thread's device room: the memory it came from, its address and size.
struct DeviceRoom {
  std::shared_ptr<ethost_device::DeviceMemory> memory;
  void* base = nullptr;
  uint64_t size = 0;
  ~DeviceRoom() {
    if (base != nullptr) memory->release(base);
  }
};

}  // namespace

using limits::kAlignment;

Outcome<uint8_t*> device_scratch(uint64_t nbytes) {
  thread_local DeviceRoom room;
  auto memory = ethost_device::active_memory();
  if (!memory.ok()) return memory.take_status();
  if (room.base == nullptr || room.memory != memory.value() || room.size < nbytes) {
    if (room.base != nullptr) room.memory->release(room.base);
    room.base = nullptr;
    room.memory = memory.take();
    ETHOST_ASSIGN_OR_RETURN(room.base, room.memory->allocate(nbytes));
    room.size = nbytes;
  }
  return static_cast<uint8_t*>(room.base);
}

Status copy_on_device(uint8_t* to, const uint8_t* from, uint64_t nbytes) {
  ETHOST_ASSIGN_OR_RETURN(DeviceCopies * copies, device_copies());
  return copies->device_to_device(to, from, nbytes);
}

Status finish_copies() {
  ETHOST_ASSIGN_OR_RETURN(DeviceCopies * copies, device_copies());
  return copies->finish();
}

uint8_t* scratch(uint64_t nbytes) {
  thread_local std::vector<uint8_t> room;
  if (room.size() < nbytes + kAlignment) room.resize(nbytes + kAlignment);
  uintptr_t base = reinterpret_cast<uintptr_t>(room.data());
  return room.data() + (kAlignment - base % kAlignment) % kAlignment;
}

bool copies_to(int device) {
  auto memory = ethost_device::active_memory();
  return memory.ok() && memory.value()->device_id() == device;
}

Status copy_into(const ShmRegion& region, uint8_t* window, const uint8_t* from, uint64_t nbytes) {
  if (region.device < 0) {
    std::memcpy(window, from, nbytes);
    return Status();
  }
  ETHOST_ASSIGN_OR_RETURN(DeviceCopies * copies, device_copies());
  Status copied = copies->to_device(window, from, nbytes);
  Status finished = copies->finish();  // also after a failed one: what was queued is waited for
  return copied.ok() ? finished : copied;
}

Status queue_into(const ShmRegion& region, uint8_t* window, const uint8_t* from, uint64_t nbytes,
                  bool& queued) {
  if (region.device < 0) {
    std::memcpy(window, from, nbytes);
    return Status();
  }
  ETHOST_ASSIGN_OR_RETURN(DeviceCopies * copies, device_copies());
  queued = true;
  return copies->to_device(window, from, nbytes);
}

}  // namespace ethost::lane
