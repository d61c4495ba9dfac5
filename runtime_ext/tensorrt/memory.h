// The shared error style and device-memory seam (runtime_ext/common), under the names this
// library's code uses.
#pragma once

#include "device_memory.h"
#include "status.h"

namespace ethost_trt {

using ethost::Error;
using ethost::Outcome;
using ethost::Status;
using ethost_device::active_memory;
using ethost_device::copy_kind;
using ethost_device::CopyKind;
using ethost_device::DeviceMemory;
using ethost_device::make_host_memory;
using ethost_device::StreamHandle;
using ethost_device::use_memory;

}  // namespace ethost_trt
