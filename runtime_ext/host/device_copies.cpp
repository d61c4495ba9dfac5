#include "device_copies.h"

using ethost_device::CopyKind;
using ethost_device::DeviceMemory;

namespace ethost {

Outcome<std::unique_ptr<DeviceCopies>> DeviceCopies::create(std::shared_ptr<DeviceMemory> memory,
                                                            const std::string& path) {
  auto stream = memory->create_stream();
  if (!stream.ok()) return stream.take_status().at("creating a device stream for", path);
  return std::unique_ptr<DeviceCopies>(new DeviceCopies(std::move(memory), stream.value()));
}

DeviceCopies::~DeviceCopies() {
  memory_->destroy_stream(stream_);
}

Status DeviceCopies::queue(void* dst, const void* src, size_t nbytes, CopyKind kind) {
  pending_ = true;  // also when queueing fails: what went before it is still to wait for
  return memory_->copy_async(dst, src, nbytes, kind, stream_);
}

Status DeviceCopies::to_device(void* device_dst, const void* host_src, size_t nbytes) {
  return queue(device_dst, host_src, nbytes, CopyKind::HostToDevice);
}

Status DeviceCopies::to_host(void* host_dst, const void* device_src, size_t nbytes) {
  return queue(host_dst, device_src, nbytes, CopyKind::DeviceToHost);
}

Status DeviceCopies::device_to_device(void* device_dst, const void* device_src, size_t nbytes) {
  return queue(device_dst, device_src, nbytes, CopyKind::DeviceToDevice);
}

Status DeviceCopies::finish() {
  if (!pending_) return Status();
  pending_ = false;
  return memory_->synchronize(stream_);
}

}  // namespace ethost
