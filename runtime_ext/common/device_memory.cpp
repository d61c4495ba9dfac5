#include <mutex>

#include "device_memory.h"

namespace ethost_device {
namespace {

// The process's one selection, shared by ethost and ethost_tensorrt through this library.
std::mutex g_mu;
std::shared_ptr<DeviceMemory> g_memory;
Status g_failure;  // why CUDA could not be used; kept so every caller gets the same reason

}  // namespace

Outcome<std::shared_ptr<DeviceMemory>> active_memory() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_memory) return g_memory;
  if (g_failure.ok()) {
    auto cuda = make_cuda_memory();
    if (cuda.ok()) {
      g_memory = cuda.take();
      return g_memory;
    }
    g_failure = cuda.take_status();
  }
  return g_failure;
}

void use_memory(std::shared_ptr<DeviceMemory> memory) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_memory = std::move(memory);
  g_failure = Status();
}

}  // namespace ethost_device
