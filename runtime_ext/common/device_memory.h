// The memory operations the TensorRT delegate and the host need, behind one interface, so the
// delegate's staging and the host's device-planned buffers run unchanged on CUDA (production,
// H200 tests) and on a host-memory stand-in (CPU CI).
//
// Built as its own shared library (libethost_device_memory.so) that both Python modules link:
// the active memory below must be ONE object per process. The host-memory stand-in only
// recognizes its own allocations as device memory, so a planned buffer the host allocated must
// come from the very object the delegate asks "is this a device pointer?". A static copy in each
// module would give each its own selection and its own stand-in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "status.h"

namespace ethost_device {

using ethost::Error;
using ethost::Outcome;
using ethost::Status;

// A cudaStream_t carried as an integer, the form TensorRT's Python API takes.
using StreamHandle = uintptr_t;

enum class CopyKind { HostToHost = 0, HostToDevice = 1, DeviceToHost = 2, DeviceToDevice = 3 };

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual const char* kind() const = 0;
  virtual int device_id() const = 0;
  // True where the device reads ordinary (pageable) host memory coherently, e.g. Jetson.
  virtual bool reads_pageable_host_memory() const = 0;
  virtual bool is_device_pointer(const void* p) const = 0;

  // Failures carry the device runtime's own words (e.g. "cudaMalloc failed: out of memory").
  virtual Outcome<void*> allocate(size_t nbytes) = 0;
  virtual void release(void* p) = 0;
  virtual Status copy_async(void* dst, const void* src, size_t nbytes, CopyKind kind,
                            StreamHandle stream) = 0;
  virtual Outcome<StreamHandle> create_stream() = 0;
  virtual Status synchronize(StreamHandle stream) = 0;
  virtual void destroy_stream(StreamHandle stream) = 0;

  // Page-locks host memory that stays the caller's (cudaHostRegister), so copies between it and
  // the device run at the link's full speed. NotSupported where nothing would gain from it.
  virtual Status pin_host(void* p, size_t nbytes) {
    (void)p;
    (void)nbytes;
    return Status(Error::NotSupported, std::string(kind()) + " memory has nothing to pin");
  }
  virtual Status unpin_host(void* p) {
    (void)p;
    return Status();
  }

  // Whether the device context still works, asked after a failed execute or load: a trivial
  // call on it (a device synchronize) fails once an error is sticky (an illegal or misaligned
  // address, a launch failure, an ECC error...), and then every later call in the process fails
  // too, so the process must be replaced. OK for a healthy context, else the runtime's words.
  // This is the one definition of a sticky fault: the service's Python asks it through
  // ethost.device_fault() for executes of both the native lane and its own scheduler.
  // A memory without a device context (a test's) has nothing to poison.
  virtual Status context_health() { return Status(); }
};

// CUDA runtime loaded with dlopen; fails (NotSupported) with a readable reason on a host
// without CUDA.
Outcome<std::shared_ptr<DeviceMemory>> make_cuda_memory();
// Tests only: "device" memory is the allocations this object made.
std::shared_ptr<DeviceMemory> make_host_memory(bool reads_pageable_host);
// Tests only: puts the host stand-in in the state a sticky CUDA error leaves a context in
// (every synchronize, copy, allocation and context_health() fails with `reason`), so the
// service's containment of a poisoned context runs on CPU through the same seam as on a GPU.
// InvalidArgument when `memory` is not the host stand-in.
Status poison_host_memory(const std::shared_ptr<DeviceMemory>& memory, const std::string& reason);

// The memory a newly initialized delegate or newly loaded method uses. CUDA unless a test
// selected host memory; delegates and methods already loaded keep the memory they started with.
Outcome<std::shared_ptr<DeviceMemory>> active_memory();
void use_memory(std::shared_ptr<DeviceMemory> memory);

inline CopyKind copy_kind(bool src_on_device, bool dst_on_device) {
  if (src_on_device) return dst_on_device ? CopyKind::DeviceToDevice : CopyKind::DeviceToHost;
  return dst_on_device ? CopyKind::HostToDevice : CopyKind::HostToHost;
}

}  // namespace ethost_device
