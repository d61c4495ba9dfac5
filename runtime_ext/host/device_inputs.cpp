#include "device_inputs.h"

#include <atomic>
#include <mutex>
#include <set>

namespace ethost {
namespace {

std::atomic<uint64_t> g_bound{0};
std::atomic<uint64_t> g_device_to_device{0};
std::atomic<uint64_t> g_to_host{0};

std::mutex g_backends_mu;
std::set<std::string>& device_backends() {
  static auto* backends = new std::set<std::string>();
  return *backends;
}

}  // namespace

void accept_device_memory(const std::string& backend_id) {
  std::lock_guard<std::mutex> lock(g_backends_mu);
  device_backends().insert(backend_id);
}

bool takes_device_memory(const std::string& backend_id) {
  std::lock_guard<std::mutex> lock(g_backends_mu);
  return device_backends().count(backend_id) > 0;
}

void count_device_input(DeviceInputRoute route) {
  switch (route) {
    case DeviceInputRoute::Bound: g_bound.fetch_add(1, std::memory_order_relaxed); break;
    case DeviceInputRoute::DeviceToDevice:
      g_device_to_device.fetch_add(1, std::memory_order_relaxed);
      break;
    case DeviceInputRoute::ToPlannedHost:
    case DeviceInputRoute::ToHostBuffer: g_to_host.fetch_add(1, std::memory_order_relaxed); break;
  }
}

DeviceInputCounts device_input_counts() {
  DeviceInputCounts counts;
  counts.bound = g_bound.load(std::memory_order_relaxed);
  counts.device_to_device = g_device_to_device.load(std::memory_order_relaxed);
  counts.to_host = g_to_host.load(std::memory_order_relaxed);
  return counts;
}

}  // namespace ethost
