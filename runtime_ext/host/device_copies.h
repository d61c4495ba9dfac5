// Request inputs into, and results out of, planned buffers that live in device memory, and
// inputs that live in device memory into planned buffers (device_inputs.h). The CPU cannot
// memcpy there (Method::set_input would), so these copies go through the device-memory seam on
// the method instance's own stream, and finish() waits for them: before execute starts (the
// delegate's stream does not order itself after ours) and before outputs reach Python.
#pragma once

#include "status.h"

#include <device_memory.h>

#include <memory>
#include <string>

namespace ethost {

class DeviceCopies {
 public:
  // `path` only names the program in errors.
  static Outcome<std::unique_ptr<DeviceCopies>> create(
      std::shared_ptr<ethost_device::DeviceMemory> memory, const std::string& path);
  ~DeviceCopies();
  DeviceCopies(const DeviceCopies&) = delete;
  DeviceCopies& operator=(const DeviceCopies&) = delete;

  Status to_device(void* device_dst, const void* host_src, size_t nbytes);
  Status to_host(void* host_dst, const void* device_src, size_t nbytes);
  Status device_to_device(void* device_dst, const void* device_src, size_t nbytes);
  // Waits for every copy queued so far (none queued: returns at once).
  Status finish();

  const ethost_device::DeviceMemory& memory() const { return *memory_; }
  const std::shared_ptr<ethost_device::DeviceMemory>& shared_memory() const { return memory_; }

 private:
  DeviceCopies(std::shared_ptr<ethost_device::DeviceMemory> memory,
               ethost_device::StreamHandle stream)
      : memory_(std::move(memory)), stream_(stream) {}

  Status queue(void* dst, const void* src, size_t nbytes, ethost_device::CopyKind kind);

  std::shared_ptr<ethost_device::DeviceMemory> memory_;
  ethost_device::StreamHandle stream_;
  bool pending_ = false;
};

}  // namespace ethost
