#include "arenas.h"

#include <executorch_allocator.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>

using ethost_device::DeviceMemory;
using executorch::runtime::Error;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::MethodMeta;
using executorch::runtime::Span;
namespace etensor = executorch::runtime::etensor;

namespace ethost {
namespace {

std::atomic<uint64_t> g_pinned{0}, g_pin_refused{0}, g_locked_bytes{0};

// The whole pages allocate_host gave a buffer of `size` bytes.
size_t locked_size(size_t size) {
  return (size + kHostPage - 1) / kHostPage * kHostPage;
}

std::string device_text(etensor::Device device) {
  return std::string(device.is_cpu() ? "cpu" : "cuda") + ":" + std::to_string(device.index());
}

Outcome<uint8_t*> allocate_host(size_t size, const std::string& action, const std::string& path) {
  size_t rounded = size == 0 ? kHostPage : locked_size(size);
  void* memory = std::aligned_alloc(kHostPage, rounded);
  if (memory == nullptr) {
    return Status(Error::MemoryAllocationFailed,
                  "could not allocate " + std::to_string(rounded) + " bytes")
        .at(action, path);
  }
  return static_cast<uint8_t*>(memory);
}

// `memory` is the process's active device memory, looked up once per method by the caller.
Outcome<uint8_t*> allocate_device(size_t size, etensor::Device device, size_t index,
                                  Outcome<std::shared_ptr<DeviceMemory>>& memory,
                                  const std::string& action, const std::string& path) {
  std::string what = "planned buffer " + std::to_string(index) + " (" + std::to_string(size) +
                     " bytes) is planned in " + device_text(device) + " memory";
  ETHOST_RETURN_IF_ERROR(memory);
  DeviceMemory& dev = *memory.value();
  if (device.index() != dev.device_id()) {
    return Status(Error::NotSupported, what +
                                           ", but this process allocates device memory on cuda:" +
                                           std::to_string(dev.device_id()))
        .at(action, path);
  }
  auto allocated = dev.allocate(size);
  if (!allocated.ok()) {
    Status failed = allocated.take_status();
    failed.reason = what + "; " + failed.reason;
    return failed.at(action, path);
  }
  return static_cast<uint8_t*>(allocated.value());
}

Outcome<std::shared_ptr<DeviceMemory>> find_device_memory(const std::string& action,
                                                          const std::string& path) {
  auto memory = ethost_device::active_memory();
  if (!memory.ok()) {
    return Status(Error::NotSupported,
                  "the program plans buffers in CUDA memory, but there is no CUDA device memory "
                  "here (" +
                      memory.status().reason + ")")
        .at(action, path);
  }
  // Such a program may copy host tensors to and from these buffers with in-graph et_copy ops
  // (exported without PropagateDeviceConfig's skip options); their kernels need a CUDA
  // DeviceAllocator registered with ExecuTorch before the method runs.
  ethost_device::ensure_executorch_allocator();
  return memory.take();
}

}  // namespace

bool lock_pages(DeviceMemory& memory, void* p, size_t size) {
  if (size > kMaxPinnedBuffer) return false;
  if (!memory.pin_host(p, locked_size(size)).ok()) {
    g_pin_refused.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  g_pinned.fetch_add(1, std::memory_order_relaxed);
  g_locked_bytes.fetch_add(locked_size(size), std::memory_order_relaxed);
  return true;
}

void unlock_pages(DeviceMemory& memory, void* p, size_t size) {
  memory.unpin_host(p);
  g_locked_bytes.fetch_sub(locked_size(size), std::memory_order_relaxed);
}

PinnedCounts pinned_counts() {
  return {g_pinned.load(std::memory_order_relaxed), g_pin_refused.load(std::memory_order_relaxed),
          g_locked_bytes.load(std::memory_order_relaxed)};
}

void ArenaFree::operator()(uint8_t* p) const {
  if (device != nullptr) {
    device->release(p);
  } else {
    std::free(p);
  }
}

PlannedArenas::PlannedArenas(std::shared_ptr<DeviceMemory> device,
                             std::vector<std::unique_ptr<uint8_t, ArenaFree>> buffers,
                             std::vector<Span<uint8_t>> spans, std::vector<etensor::Device> devices)
    : device_(std::move(device)),
      buffers_(std::move(buffers)),
      spans_(std::move(spans)),
      devices_(std::move(devices)),
      // Device metadata only where there is a device buffer, as ExecuTorch expects for CPU-only
      // programs.
      allocator_(device_ ? HierarchicalAllocator({spans_.data(), spans_.size()},
                                                 {devices_.data(), devices_.size()})
                         : HierarchicalAllocator({spans_.data(), spans_.size()})),
      pin_state_(buffers_.size(), 0) {}

PlannedArenas::~PlannedArenas() {
  // Before the buffers are freed (members go after this body): a freed page must not stay
  // registered with the driver.
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (pin_state_[i] == 1) unlock_pages(*pinned_by_, buffers_[i].get(), spans_[i].size());
  }
}

void PlannedArenas::pin_for_copies(const void* p, const std::shared_ptr<DeviceMemory>& memory) {
  std::optional<size_t> i = holding(p);
  if (!i || !devices_[*i].is_cpu() || pin_state_[*i] != 0) return;
  const Span<uint8_t>& span = spans_[*i];
  // A second device memory (never one per process today) would need its own bookkeeping.
  if ((pinned_by_ && pinned_by_ != memory) || !lock_pages(*memory, span.data(), span.size())) {
    pin_state_[*i] = 2;
    return;
  }
  pin_state_[*i] = 1;
  pinned_by_ = memory;
}

Outcome<std::unique_ptr<PlannedArenas>> PlannedArenas::allocate(const MethodMeta& meta,
                                                                const std::string& path) {
  const std::string action =
      "allocating planned buffers of method '" + std::string(meta.name()) + "' of";
  // Declared before the buffers: a partial set freed on failure still needs its memory.
  std::optional<Outcome<std::shared_ptr<DeviceMemory>>> device_memory;
  std::vector<std::unique_ptr<uint8_t, ArenaFree>> buffers;
  std::vector<Span<uint8_t>> spans;
  std::vector<etensor::Device> devices;
  for (size_t i = 0; i < meta.num_memory_planned_buffers(); ++i) {
    auto size = meta.memory_planned_buffer_size(i);
    if (!size.ok()) {
      return Status(size.error(), "planned buffer " + std::to_string(i))
          .at("reading planned buffers of", path);
    }
    auto device = meta.memory_planned_buffer_device(i);
    if (!device.ok()) {
      return Status(device.error(), "device of planned buffer " + std::to_string(i))
          .at("reading planned buffers of", path);
    }
    const size_t nbytes = static_cast<size_t>(size.get());
    const bool on_cpu = device->is_cpu();
    if (!on_cpu && !device_memory) {
      device_memory.emplace(find_device_memory(action, path));
    }
    auto memory = on_cpu ? allocate_host(nbytes, action, path)
                         : allocate_device(nbytes, device.get(), i, *device_memory, action, path);
    ETHOST_RETURN_IF_ERROR(memory);
    ArenaFree free_with{on_cpu ? nullptr : device_memory->value().get()};
    buffers.emplace_back(memory.value(), free_with);
    spans.emplace_back(memory.value(), nbytes);
    devices.push_back(device.get());
  }
  std::shared_ptr<DeviceMemory> device;
  if (device_memory) {
    device = device_memory->value();
  }
  return std::unique_ptr<PlannedArenas>(new PlannedArenas(std::move(device), std::move(buffers),
                                                          std::move(spans), std::move(devices)));
}

std::vector<uintptr_t> PlannedArenas::addresses() const {
  std::vector<uintptr_t> out;
  for (const auto& buffer : buffers_) {
    out.push_back(reinterpret_cast<uintptr_t>(buffer.get()));
  }
  return out;
}

std::optional<size_t> PlannedArenas::holding(const void* p) const {
  auto* byte = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < spans_.size(); ++i) {
    if (byte >= spans_[i].data() && byte < spans_[i].data() + spans_[i].size()) return i;
  }
  return std::nullopt;
}

bool PlannedArenas::on_device(const void* p) const {
  std::optional<size_t> i = holding(p);
  return i && !devices_[*i].is_cpu();
}

}  // namespace ethost
