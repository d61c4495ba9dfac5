// ExecuTorch 1.5 plans a delegate that targets "cuda:N" in CUDA memory and, unless the program
// was exported with PropagateDeviceConfig's skip options, copies the method's host tensors in and
// out with in-graph et_copy::_h2d_copy / _d2h_copy ops. Those kernels copy through the
// DeviceAllocator registered for CUDA in ExecuTorch's process-wide DeviceAllocatorRegistry; this
// registers one that forwards to the device-memory seam (device_memory.h).
#pragma once

namespace ethost_device {

// Registers our CUDA allocator on the first call in the process; later calls do nothing. Where
// another library already registered one, that one is kept (the registry aborts on a second
// registration) and a log line says so: in-graph copies then bypass the seam.
// Called when a method that plans CUDA buffers is loaded, not when this library loads, because
// ExecuTorch's own CUDA backend registers its allocator unguarded from a static initializer: the
// later we register, the more likely such a library has already loaded and is kept, rather than
// aborting the process when it loads after us.
void ensure_executorch_allocator();

}  // namespace ethost_device
