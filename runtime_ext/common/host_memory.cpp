// Host-memory stand-in for a GPU, for tests only. It behaves like a discrete device (or, when
// asked, one that reads pageable host memory) and refuses a copy whose direction does not match
// where its pointers live, so a wrong staging decision fails a CPU test instead of passing.
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "device_memory.h"

namespace ethost_device {
namespace {

class HostMemory final : public DeviceMemory {
 public:
  explicit HostMemory(bool reads_pageable_host) : reads_pageable_host_(reads_pageable_host) {}

  ~HostMemory() override {
    for (auto& [base, size] : allocations_) std::free(reinterpret_cast<void*>(base));
  }

  const char* kind() const override { return "host"; }
  int device_id() const override { return 0; }
  bool reads_pageable_host_memory() const override { return reads_pageable_host_; }

  bool is_device_pointer(const void* p) const override {
    auto a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocations_.upper_bound(a);
    if (it == allocations_.begin()) return false;
    --it;
    return a < it->first + it->second;
  }

  Outcome<void*> allocate(size_t nbytes) override {
    ETHOST_RETURN_IF_ERROR(context_health());
    // Like cudaMalloc: 256-byte aligned, and never null for a zero-byte request.
    size_t size = nbytes == 0 ? 256 : (nbytes + 255) / 256 * 256;
    void* p = std::aligned_alloc(256, size);
    if (p == nullptr) {
      return Status(Error::MemoryAllocationFailed,
                    "host allocation of " + std::to_string(nbytes) + " bytes failed");
    }
    std::lock_guard<std::mutex> lock(mu_);
    allocations_[reinterpret_cast<uintptr_t>(p)] = size;
    return p;
  }

  void release(void* p) override {
    if (p == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (allocations_.erase(reinterpret_cast<uintptr_t>(p)) == 1) std::free(p);
  }

  Status copy_async(void* dst, const void* src, size_t nbytes, CopyKind kind,
                    StreamHandle) override {
    ETHOST_RETURN_IF_ERROR(context_health());
    bool src_dev = is_device_pointer(src);
    bool dst_dev = is_device_pointer(dst);
    if (copy_kind(src_dev, dst_dev) != kind) {
      return Status(Error::InvalidArgument,
                    "copy of " + std::to_string(nbytes) + " bytes declared as kind " +
                        std::to_string(static_cast<int>(kind)) + " but source is " +
                        (src_dev ? "device" : "host") + " and destination is " +
                        (dst_dev ? "device" : "host"));
    }
    if (nbytes > 0) std::memmove(dst, src, nbytes);
    return Status();
  }

  Outcome<StreamHandle> create_stream() override {
    std::lock_guard<std::mutex> lock(mu_);
    return ++next_stream_;
  }
  Status synchronize(StreamHandle) override { return context_health(); }
  void destroy_stream(StreamHandle) override {}

  Status context_health() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (poisoned_.empty()) return Status();
    return Status(Error::Internal, poisoned_);
  }

  void poison(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu_);
    poisoned_ = reason.empty() ? "a simulated sticky device error" : reason;
  }

 private:
  const bool reads_pageable_host_;
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> allocations_;
  StreamHandle next_stream_ = 0;
  std::string poisoned_;  // a simulated sticky error's words; empty while healthy
};

}  // namespace

std::shared_ptr<DeviceMemory> make_host_memory(bool reads_pageable_host) {
  return std::make_shared<HostMemory>(reads_pageable_host);
}

Status poison_host_memory(const std::shared_ptr<DeviceMemory>& memory, const std::string& reason) {
  auto* host = dynamic_cast<HostMemory*>(memory.get());
  if (host == nullptr) {
    return Status(Error::InvalidArgument, "only the host-memory stand-in can be poisoned");
  }
  host->poison(reason);
  return Status();
}

}  // namespace ethost_device
