// Inputs whose bytes are in device memory (a CUDA shared memory region, say): where each one
// goes, and a process-wide count of what that took, which the server reports as copies.
//
// The CPU must never memcpy such an input, and Method::set_input memcpy's into a memory-planned
// input. So an input the program does not plan is given to the method as the device pointer
// itself (ExecuTorch then shares it: the delegate binds it); one planned in device memory is
// copied device to device into its planned buffer; one planned in host memory is copied from
// the device into its planned buffer. The last two are the copies.
#pragma once

#include <cstdint>

namespace ethost {

enum class DeviceInputRoute {
  Bound,           // not memory-planned: the method reads the caller's device memory
  DeviceToDevice,  // planned in device memory: copied there
  ToHost           // planned in host memory: copied from the device into it
};

inline DeviceInputRoute route_device_input(bool planned_on_device, bool memory_planned) {
  if (planned_on_device) return DeviceInputRoute::DeviceToDevice;
  return memory_planned ? DeviceInputRoute::ToHost : DeviceInputRoute::Bound;
}

struct DeviceInputCounts {
  uint64_t bound = 0;
  uint64_t device_to_device = 0;
  uint64_t to_host = 0;
};

void count_device_input(DeviceInputRoute route);
DeviceInputCounts device_input_counts();

}  // namespace ethost
