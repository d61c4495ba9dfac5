#include "scratch.h"

#include <atomic>
#include <map>

namespace ethost_trt {
namespace {

struct Scratch {
  std::mutex mu;
  std::shared_ptr<DeviceMemory> memory;
  void* data = nullptr;
  size_t capacity = 0;
  // Read without the lock (which an execute holds): a Python caller holding the GIL must not
  // wait on it while that execute waits for the GIL.
  std::atomic<size_t> published{0};
};

std::mutex g_mu;
// One per device memory object, kept for the process (a static destructor must not free device
// memory after the runtime is gone).
std::map<const DeviceMemory*, Scratch*>& scratches() {
  static auto* all = new std::map<const DeviceMemory*, Scratch*>();
  return *all;
}

Scratch& scratch_of(const std::shared_ptr<DeviceMemory>& memory) {
  std::lock_guard<std::mutex> lock(g_mu);
  Scratch*& s = scratches()[memory.get()];
  if (s == nullptr) {
    s = new Scratch();
    s->memory = memory;
  }
  return *s;
}

}  // namespace

Outcome<ScratchClaim> claim_shared_scratch(const std::shared_ptr<DeviceMemory>& memory,
                                           size_t bytes) {
  Scratch& s = scratch_of(memory);
  ScratchClaim claim;
  claim.lock = std::unique_lock<std::mutex>(s.mu);
  if (bytes > s.capacity) {
    // Whoever used the old buffer drained its stream before letting the claim go.
    s.memory->release(s.data);
    s.data = nullptr;
    s.capacity = 0;
    s.published.store(0, std::memory_order_relaxed);
    auto got = s.memory->allocate(bytes);
    if (!got.ok()) {
      Status failed = got.take_status();
      failed.reason =
          "shared activation scratch of " + std::to_string(bytes) + " bytes: " + failed.reason;
      return failed;
    }
    s.data = got.value();
    s.capacity = bytes;
    s.published.store(bytes, std::memory_order_relaxed);
  }
  claim.data = s.data;
  claim.size = s.capacity;
  return claim;
}

size_t shared_scratch_bytes(const DeviceMemory* memory) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto found = scratches().find(memory);
  return found == scratches().end() ? 0 : found->second->published.load(std::memory_order_relaxed);
}

}  // namespace ethost_trt
