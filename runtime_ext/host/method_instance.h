// One executable copy of a method: its own planned arenas and runtime state over the shared
// program. One thread at a time may run it; parallelism comes from several instances.
#pragma once

#include "arenas.h"
#include "device_copies.h"
#include "device_inputs.h"
#include "host_buffer.h"
#include "method_spec.h"
#include "program.h"
#include "tensor_io.h"

#include <executorch/extension/memory_allocator/malloc_memory_allocator.h>
#include <executorch/runtime/executor/memory_manager.h>
#include <executorch/runtime/executor/method.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ethost {

class MethodInstance {
 public:
  static Outcome<std::unique_ptr<MethodInstance>> load(std::shared_ptr<const LoadedProgram> program,
                                                       const std::string& name);

  const std::string& name() const { return name_; }
  const MethodSpec& spec() const { return spec_; }
  const LoadedProgram& program() const { return *program_; }
  std::vector<uintptr_t> arena_addresses() const { return arenas_->addresses(); }

  // Whether kernels may use ExecuTorch's shared thread pool (intra-op parallelism). Servers
  // running several instances in parallel threads turn it off; see run().
  bool kernel_threadpool() const { return kernel_threadpool_; }
  void set_kernel_threadpool(bool enabled) { kernel_threadpool_ = enabled; }

  // Claim for one execute; false while another thread holds it.
  bool try_acquire() { return !busy_.exchange(true, std::memory_order_acquire); }
  void release() { busy_.store(false, std::memory_order_release); }

  // GIL-free: binds inputs, executes, copies outputs. Caller holds the claim. `destinations`,
  // when given, has one entry per output: device memory to write it into (device_inputs.h),
  // host memory to write it into, or none (a null data pointer: the output comes back as a
  // host copy).
  Outcome<std::vector<OutputBuffer>> run(
      std::vector<InputBinding>& inputs,
      const std::vector<OutputDestination>* destinations = nullptr);

  // How long the last run() took. Measured here rather than by the caller, whose clock would
  // also count the wait to take the GIL back (up to the interpreter's switch interval).
  uint64_t last_run_ns() const { return last_run_ns_.load(std::memory_order_relaxed); }

 private:
  MethodInstance() = default;
  Outcome<std::vector<OutputBuffer>> run_timed(std::vector<InputBinding>& inputs,
                                               const std::vector<OutputDestination>* destinations);
  // Before execute: checks the destinations, and gives each output left out of planning its
  // memory (its destination when only device delegates write it, else a host buffer).
  Status set_outputs(const std::vector<OutputDestination>* destinations);
  // After execute: the output's bytes into its destination (nothing to do when bound there).
  Outcome<OutputBuffer> write_output(size_t index, const OutputDestination& destination,
                                     std::vector<DeviceOutputRoute>& routes);
  Status set_inputs(std::vector<InputBinding>& inputs,
                    std::deque<executorch::aten::TensorImpl>& impls);
  Status set_device_input(size_t index, InputBinding& in,
                          std::deque<executorch::aten::TensorImpl>& impls);
  // The instance's copies, made on the first input in device memory for a method that plans
  // nothing there; refused on a host without device memory.
  Outcome<DeviceCopies*> device_copies();
  // Waits for queued device copies; returns `failed`, or the copies' own failure.
  Status finish_device_copies(Status failed, const char* what);

  std::string name_;
  std::shared_ptr<const LoadedProgram> program_;
  // The Method points into everything below, so it is declared last (destroyed first).
  std::unique_ptr<PlannedArenas> arenas_;
  // For methods with planned buffers in device memory, and once an input came in device memory.
  std::unique_ptr<DeviceCopies> device_copies_;
  // Per input: the method's own planned tensor when it lives in device memory.
  std::vector<std::optional<executorch::aten::Tensor>> device_inputs_;
  // Per input: host memory for a device input the CPU may read (device_inputs.h).
  std::vector<HostBuffer> host_copies_;
  // Per output: host memory for an output left out of planning, when not written in place.
  std::vector<HostBuffer> output_buffers_;
  bool unplanned_outputs_ = false;
  executorch::extension::MallocMemoryAllocator method_allocator_;
  executorch::extension::MallocMemoryAllocator temp_allocator_;
  std::unique_ptr<executorch::runtime::MemoryManager> memory_manager_;
  std::optional<executorch::runtime::Method> method_;
  MethodSpec spec_;
  std::atomic<bool> busy_{false};
  bool kernel_threadpool_ = true;
  std::atomic<uint64_t> last_run_ns_{0};
};

}  // namespace ethost
