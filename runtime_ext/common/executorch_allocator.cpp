#include "executorch_allocator.h"

#include <mutex>
#include <string>

#include <executorch/runtime/core/device_allocator.h>
#include <executorch/runtime/platform/log.h>

#include "device_memory.h"

namespace ethost_device {
namespace {

using executorch::runtime::DeviceAllocator;
using executorch::runtime::Result;
namespace etensor = executorch::runtime::etensor;

// The ExecuTorch boundary: the seam's Status becomes ExecuTorch's Error here, its reason a log
// line. Stateless: registered once per process, it asks for the active memory at every call, so
// after a test switches between CUDA and the host-memory stand-in (or between two stand-ins),
// methods loaded from then on have their copies done by the memory their buffers came from.
// Production gets CUDA the same way.
class SeamAllocator final : public DeviceAllocator {
 public:
  Result<void*> allocate(size_t nbytes, etensor::DeviceIndex index, size_t alignment) override {
    // The seam hands out 256-byte aligned memory (cudaMalloc's guarantee, and the stand-in's).
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 256) {
      ET_LOG(Error, "CUDA device allocator: alignment %zu is not a power of two up to 256",
             alignment);
      return Error::NotSupported;
    }
    auto memory = memory_for(index, "allocate");
    if (!memory.ok()) return memory.error();
    auto p = memory.get()->allocate(nbytes);
    if (!p.ok()) {
      ET_LOG(Error, "CUDA device allocator: %s", p.status().reason.c_str());
      return p.status().code;
    }
    return p.value();
  }

  void deallocate(void* ptr, etensor::DeviceIndex index) override {
    auto memory = memory_for(index, "deallocate");
    if (memory.ok()) memory.get()->release(ptr);
  }

  Error copy_host_to_device(void* dst, const void* src, size_t nbytes,
                            etensor::DeviceIndex index) override {
    return copy(dst, src, nbytes, CopyKind::HostToDevice, index);
  }

  Error copy_device_to_host(void* dst, const void* src, size_t nbytes,
                            etensor::DeviceIndex index) override {
    return copy(dst, src, nbytes, CopyKind::DeviceToHost, index);
  }

  etensor::DeviceType device_type() const override { return etensor::DeviceType::CUDA; }

 private:
  // ExecuTorch has no stream in this interface and the next op may read the result at once, so
  // each copy is queued on the default stream and waited for. The delegate synchronizes its own
  // stream before returning, so its outputs are complete before a _d2h_copy reads them.
  Error copy(void* dst, const void* src, size_t nbytes, CopyKind kind, etensor::DeviceIndex index) {
    auto memory = memory_for(index, "copy");
    if (!memory.ok()) return memory.error();
    DeviceMemory& m = *memory.get();
    Status s = m.copy_async(dst, src, nbytes, kind, 0);
    if (s.ok()) s = m.synchronize(0);
    if (!s.ok()) {
      ET_LOG(Error, "CUDA device allocator: %s of %zu bytes failed: %s",
             kind == CopyKind::HostToDevice ? "host-to-device copy" : "device-to-host copy", nbytes,
             s.reason.c_str());
    }
    return s.code;
  }

  static Result<std::shared_ptr<DeviceMemory>> memory_for(etensor::DeviceIndex index,
                                                          const char* what) {
    auto memory = active_memory();
    if (!memory.ok()) {
      ET_LOG(Error, "CUDA device allocator: cannot %s: %s", what, memory.status().reason.c_str());
      return memory.status().code;
    }
    if (index != memory.value()->device_id()) {
      ET_LOG(Error, "CUDA device allocator: cannot %s on cuda:%d; this process uses cuda:%d", what,
             static_cast<int>(index), memory.value()->device_id());
      return Error::InvalidArgument;
    }
    return memory.take();
  }
};

}  // namespace

void ensure_executorch_allocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (executorch::runtime::get_device_allocator(etensor::DeviceType::CUDA) != nullptr) {
      ET_LOG(Info,
             "A CUDA device allocator is already registered with ExecuTorch by another library; "
             "keeping it. In-graph device copies (et_copy ops) go through it, not through ethost's "
             "device memory.");
      return;
    }
    // The registry keeps the pointer for the life of the process.
    static SeamAllocator allocator;
    executorch::runtime::register_device_allocator(&allocator);
  });
}

}  // namespace ethost_device
