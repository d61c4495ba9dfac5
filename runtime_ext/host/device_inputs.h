// Inputs whose bytes are in device memory (a CUDA shared memory region, say): where each one
// goes, and a process-wide count of what that took, which the server reports as copies.
//
// The CPU must never memcpy such an input, and Method::set_input memcpy's into a memory-planned
// input. So an input the program does not plan, and that only delegates taking device memory
// read (plan_reader.h), is given to the method as the device pointer itself (ExecuTorch then
// shares it: the delegate binds it); one planned in device memory is copied device to device
// into its planned buffer; one planned in host memory is copied from the device into it, and an
// unplanned one the CPU may read is copied from the device into a host buffer of the instance.
// All but the first are copies.
#pragma once

#include <cstdint>
#include <string>

namespace ethost {

enum class DeviceInputRoute {
  Bound,           // not memory-planned, read by device delegates only: read where it is
  DeviceToDevice,  // planned in device memory: copied there
  ToPlannedHost,   // planned in host memory: copied from the device into it
  ToHostBuffer     // not planned, but the CPU may read it: copied into a host buffer
};

inline DeviceInputRoute route_device_input(bool planned_on_device, bool memory_planned,
                                           bool read_only_by_device_delegates) {
  if (planned_on_device) return DeviceInputRoute::DeviceToDevice;
  if (memory_planned) return DeviceInputRoute::ToPlannedHost;
  return read_only_by_device_delegates ? DeviceInputRoute::Bound : DeviceInputRoute::ToHostBuffer;
}

// Backends whose delegates take device memory for their arguments (the TensorRT delegate binds
// a device pointer, staging it only off a 256-byte boundary). Registered with the backend,
// before programs are opened; none by default, so nothing is bound that the CPU might read.
void accept_device_memory(const std::string& backend_id);
bool takes_device_memory(const std::string& backend_id);

struct DeviceInputCounts {
  uint64_t bound = 0;
  uint64_t device_to_device = 0;
  uint64_t to_host = 0;  // into a planned host buffer or the instance's own
};

void count_device_input(DeviceInputRoute route);
DeviceInputCounts device_input_counts();

}  // namespace ethost
