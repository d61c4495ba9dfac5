#include <mutex>

#include "device_memory.h"

namespace ethost_device {
namespace {

// The process's one selection, shared by ethost and ethost_tensorrt through this library.
std::mutex g_mu;
std::shared_ptr<DeviceMemory> g_memory;
std::string g_failure;  // why CUDA could not be used; kept so every caller gets the same reason

}  // namespace

Result<std::shared_ptr<DeviceMemory>> active_memory(std::string* why) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_memory) return g_memory;
  if (g_failure.empty()) {
    auto cuda = make_cuda_memory(&g_failure);
    if (cuda.ok()) {
      g_memory = cuda.get();
      return g_memory;
    }
  }
  *why = g_failure;
  return Error::NotSupported;
}

void use_memory(std::shared_ptr<DeviceMemory> memory) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_memory = std::move(memory);
  g_failure.clear();
}

}  // namespace ethost_device
