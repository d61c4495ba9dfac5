#include "method_instance.h"

#include "executorch_log.h"

#include <executorch/extension/threadpool/threadpool_guard.h>

#include <executorch/runtime/core/exec_aten/util/dim_order_util.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/core/portable_type/tensor_impl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>

using executorch::aten::Tensor;
using executorch::aten::TensorImpl;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::MemoryManager;

namespace ethost {
namespace {

// The method's planned input takes the caller's shape (dynamic dimensions), then the caller's
// bytes are queued into it by `copy`. Both are contiguous in the same dim order, else refused.
template <typename Copy>
Status queue_planned_input(Tensor& planned, const InputBinding& in, Copy copy) {
  if (!executorch::runtime::is_contiguous_dim_order(planned.dim_order().data(), planned.dim())) {
    return Status(Error::NotSupported,
                  "its buffer is planned in a non-contiguous dim order, which the host cannot "
                  "fill");
  }
  Error resized = executorch::runtime::resize_tensor(planned, {in.sizes.data(), in.ndim});
  if (resized != Error::Ok) {
    return Status(resized, "its planned tensor cannot take the given shape");
  }
  return copy(planned.mutable_data_ptr(), in.data, planned.nbytes());
}

size_t tensor_nbytes(const InputBinding& in) {
  size_t n = executorch::runtime::elementSize(in.dtype);
  for (size_t d = 0; d < in.ndim; ++d) n *= static_cast<size_t>(in.sizes[d]);
  return n;
}

Status queue_device_input(Tensor& planned, const InputBinding& in, DeviceCopies& copies) {
  Status copied = queue_planned_input(planned, in, [&](void* dst, const void* src, size_t n) {
    return copies.to_device(dst, src, n);
  });
  if (!copied.ok()) copied.reason = "copying it to device memory: " + copied.reason;
  return copied;
}

}  // namespace

Outcome<void*> HostBuffer::reserve(size_t nbytes) {
  if (nbytes <= capacity_ && data_) return data_.get();
  size_t rounded = (nbytes + 255) / 256 * 256;
  void* memory = std::aligned_alloc(256, rounded > 0 ? rounded : 256);
  if (memory == nullptr) {
    return Status(Error::MemoryAllocationFailed,
                  "could not allocate " + std::to_string(nbytes) + " bytes of host memory");
  }
  data_.reset(memory);
  capacity_ = rounded;
  return memory;
}

Outcome<std::unique_ptr<MethodInstance>> MethodInstance::load(
    std::shared_ptr<const LoadedProgram> program, const std::string& name) {
  std::unique_ptr<MethodInstance> instance(new MethodInstance());
  instance->name_ = name;
  instance->program_ = std::move(program);
  const LoadedProgram& loaded = *instance->program_;
  const std::string action = "loading method '" + name + "' of";

  ETHOST_ASSIGN_OR_RETURN(auto meta, loaded.method_meta(name));
  ETHOST_ASSIGN_OR_RETURN(instance->arenas_, PlannedArenas::allocate(meta, loaded.path()));
  if (instance->arenas_->device_memory()) {
    ETHOST_ASSIGN_OR_RETURN(
        instance->device_copies_,
        DeviceCopies::create(instance->arenas_->device_memory(), loaded.path()));
  }
  instance->memory_manager_ = std::make_unique<MemoryManager>(
      &instance->method_allocator_, instance->arenas_->allocator(), &instance->temp_allocator_);

  clear_last_log_error();
  auto method = loaded.program().load_method(name.c_str(), instance->memory_manager_.get(), nullptr,
                                             loaded.data_map());
  if (!method.ok()) {
    auto error = from_executorch(method.error(), action, loaded.path());
    if (!loaded.data_paths().empty() &&
        (method.error() == Error::InvalidExternalData || method.error() == Error::NotFound)) {
      std::string files;
      for (const auto& path : loaded.data_paths()) {
        files += (files.empty() ? "" : ", ") + path;
      }
      error.reason +=
          (error.reason.empty() ? "" : " ") + std::string("(data files: ") + files + ")";
    }
    return error;
  }
  instance->method_.emplace(std::move(method.get()));
  instance->device_inputs_.resize(instance->method_->inputs_size());
  for (size_t i = 0; i < instance->device_inputs_.size(); ++i) {
    // MethodMeta says whether an input is planned, not where; the loaded tensor's data pointer
    // does. mutable_input is deprecated in favour of set_input, which is what must be avoided.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    EValue& input = instance->method_->mutable_input(i);
#pragma GCC diagnostic pop
    if (input.isTensor() && instance->arenas_->on_device(input.toTensor().const_data_ptr())) {
      instance->device_inputs_[i] = input.toTensor();
    }
  }

  ETHOST_ASSIGN_OR_RETURN(instance->spec_,
                          describe_method(meta, *instance->method_, loaded.path()));
  std::vector<bool> device_read = loaded.inputs_read_only_by_device_delegates(name);
  for (size_t i = 0; i < device_read.size() && i < instance->spec_.inputs.size(); ++i) {
    instance->spec_.inputs[i].read_by_device_delegates_only = device_read[i];
  }
  instance->host_copies_.resize(instance->spec_.inputs.size());
  return instance;
}

Status MethodInstance::set_inputs(std::vector<InputBinding>& inputs,
                                  std::deque<TensorImpl>& impls) {
  const std::string& path = program_->path();
  for (size_t i = 0; i < inputs.size(); ++i) {
    InputBinding& in = inputs[i];
    const std::string action =
        "setting input " + std::to_string(i) + " of method '" + name_ + "' of";
    Error status;
    if (in.is_tensor && in.on_device) {
      Status placed = set_device_input(i, in, impls);
      if (!placed.ok()) return placed.at(action, path);
      continue;
    } else if (device_inputs_[i]) {
      Status queued = queue_device_input(*device_inputs_[i], in, *device_copies_);
      if (!queued.ok()) return queued.at(action, path);
      continue;
    } else if (in.is_tensor) {
      impls.emplace_back(in.dtype, static_cast<ssize_t>(in.ndim), in.sizes.data(), in.data,
                         in.dim_order.data(), in.strides.data());
      status = method_->set_input(EValue(Tensor(&impls.back())), i);
    } else {
      status = method_->set_input(in.scalar, i);
    }
    if (status != Error::Ok) {
      return from_executorch(status, action, path);
    }
  }
  return Status();
}

Outcome<DeviceCopies*> MethodInstance::device_copies() {
  if (device_copies_) return device_copies_.get();
  auto memory = ethost_device::active_memory();
  if (!memory.ok()) {
    return Status(Error::NotSupported,
                  "it is in device memory, but this host has no device memory to read it from (" +
                      memory.status().reason + ")");
  }
  ETHOST_ASSIGN_OR_RETURN(device_copies_, DeviceCopies::create(memory.take(), program_->path()));
  return device_copies_.get();
}

Status MethodInstance::set_device_input(size_t index, InputBinding& in,
                                        std::deque<TensorImpl>& impls) {
  ETHOST_ASSIGN_OR_RETURN(DeviceCopies * copies, device_copies());
  if (in.data != nullptr && !copies->memory().is_device_pointer(in.data)) {
    char address[32];
    std::snprintf(address, sizeof(address), "%p", in.data);
    return Status(Error::InvalidArgument, std::string("it claims device memory at ") + address +
                                              ", which this host's " + copies->memory().kind() +
                                              " memory does not recognize");
  }
  const TensorSpec& spec = spec_.inputs[index];
  DeviceInputRoute route = route_device_input(
      device_inputs_[index].has_value(), spec.memory_planned, spec.read_by_device_delegates_only);
  Status placed;
  auto to_host = [&](void* dst, const void* src, size_t n) { return copies->to_host(dst, src, n); };
  if (route == DeviceInputRoute::DeviceToDevice) {
    placed =
        queue_planned_input(*device_inputs_[index], in, [&](void* dst, const void* src, size_t n) {
          return copies->device_to_device(dst, src, n);
        });
    if (!placed.ok()) placed.reason = "copying it between device buffers: " + placed.reason;
  } else if (route == DeviceInputRoute::ToPlannedHost) {
    // Set with set_input, ExecuTorch would memcpy device memory on the CPU: the planned host
    // tensor is filled by a device-to-host copy instead.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    EValue& planned = method_->mutable_input(index);
#pragma GCC diagnostic pop
    placed = queue_planned_input(planned.toTensor(), in, to_host);
    if (!placed.ok()) placed.reason = "copying it from device memory: " + placed.reason;
  } else {
    void* data = in.data;
    if (route == DeviceInputRoute::ToHostBuffer) {
      // Not planned, but a CPU kernel (or the output copy) may read it: it gets host memory.
      ETHOST_ASSIGN_OR_RETURN(
          data, host_copies_[index].reserve(std::max(spec.nbytes, tensor_nbytes(in))));
      placed = to_host(data, in.data, tensor_nbytes(in));
      if (!placed.ok()) {
        placed.reason = "copying it from device memory: " + placed.reason;
        return placed;
      }
    }
    // Not memory-planned: ExecuTorch shares the pointer, so a delegate sees the device memory.
    impls.emplace_back(in.dtype, static_cast<ssize_t>(in.ndim), in.sizes.data(), data,
                       in.dim_order.data(), in.strides.data());
    Error status = method_->set_input(EValue(Tensor(&impls.back())), index);
    if (status != Error::Ok) return Status(status, last_log_error());
  }
  if (placed.ok()) count_device_input(route);
  return placed;
}

Status MethodInstance::finish_device_copies(Status failed, const char* what) {
  if (!device_copies_) {
    return failed;
  }
  // Always waited for: queued copies still read the caller's arrays or write our output buffers.
  Status copied = device_copies_->finish();
  if (failed.ok() && !copied.ok()) {
    failed = copied.at(std::string("copying ") + what + " of method '" + name_ + "' of",
                       program_->path());
  }
  return failed;
}

Outcome<std::vector<OutputBuffer>> MethodInstance::run(std::vector<InputBinding>& inputs) {
  auto begun = std::chrono::steady_clock::now();
  Outcome<std::vector<OutputBuffer>> outcome = run_timed(inputs);
  auto took = std::chrono::steady_clock::now() - begun;
  last_run_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(took).count(),
                     std::memory_order_relaxed);
  return outcome;
}

Outcome<std::vector<OutputBuffer>> MethodInstance::run_timed(std::vector<InputBinding>& inputs) {
  const std::string& path = program_->path();
  // TensorImpls point into `inputs`, which is not resized while they live; a deque never moves
  // its elements, so the Tensors handed to set_input stay valid.
  std::deque<TensorImpl> impls;
  clear_last_log_error();
  Status failed = finish_device_copies(set_inputs(inputs, impls), "inputs");
  ETHOST_RETURN_IF_ERROR(failed);
  Error status;
  {
    // Kernels share one process-wide thread pool, which runs one parallel region at a time
    // and spins its workers between regions; instances running in their own threads then slow
    // each other down instead of scaling, so they can run their kernels inline instead.
    std::optional<executorch::extension::threadpool::NoThreadPoolGuard> inline_kernels;
    if (!kernel_threadpool_) inline_kernels.emplace();
    status = method_->execute();
  }
  if (status != Error::Ok) {
    return from_executorch(status, "executing method '" + name_ + "' of", path);
  }
  std::vector<OutputBuffer> outputs;
  outputs.reserve(method_->outputs_size());
  for (size_t i = 0; i < method_->outputs_size() && failed.ok(); ++i) {
    const EValue& value = method_->get_output(i);
    bool on_device = value.isTensor() && arenas_->on_device(value.toTensor().const_data_ptr());
    auto output = copy_output(value, i, name_, on_device ? device_copies_.get() : nullptr);
    if (output.ok()) {
      outputs.push_back(output.take());
    } else {
      failed = output.take_status();
      failed.path = path;
    }
  }
  ETHOST_RETURN_IF_ERROR(finish_device_copies(std::move(failed), "outputs"));
  return outputs;
}

}  // namespace ethost
