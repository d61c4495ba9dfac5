#include "method_instance.h"

#include "executorch_log.h"
#include "device_memory.h"
#include "execute_registry.h"

#include <executorch/extension/threadpool/threadpool_guard.h>

#include <executorch/runtime/core/exec_aten/util/dim_order_util.h>
#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/core/portable_type/tensor_impl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
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
  std::vector<bool> device_written = loaded.outputs_written_only_by_device_delegates(name);
  for (size_t i = 0; i < instance->spec_.outputs.size(); ++i) {
    TensorSpec& output = instance->spec_.outputs[i];
    output.written_by_device_delegates_only = i < device_written.size() && device_written[i];
    instance->unplanned_outputs_ |= output.is_tensor && !output.memory_planned;
  }
  instance->output_buffers_.resize(instance->spec_.outputs.size());
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
    arenas_->pin_for_copies(planned.toTensor().const_data_ptr(), copies->shared_memory());
    placed = queue_planned_input(planned.toTensor(), in, to_host);
    if (!placed.ok()) placed.reason = "copying it from device memory: " + placed.reason;
  } else {
    void* data = in.data;
    if (route == DeviceInputRoute::ToHostBuffer) {
      // Not planned, but a CPU kernel (or the output copy) may read it: it gets host memory.
      ETHOST_ASSIGN_OR_RETURN(
          data, host_copies_[index].reserve(std::max(spec.nbytes, tensor_nbytes(in))));
      host_copies_[index].lock_for_copies(copies->shared_memory());
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

Status MethodInstance::set_outputs(const std::vector<OutputDestination>* destinations) {
  const std::string& path = program_->path();
  if (destinations != nullptr) {
    if (destinations->size() != spec_.outputs.size()) {
      return Status(Error::InvalidArgument,
                    "expected " + std::to_string(spec_.outputs.size()) +
                        " output destinations (one per output, None for none), got " +
                        std::to_string(destinations->size()))
          .at("writing outputs of method '" + name_ + "' of", path);
    }
    for (size_t i = 0; i < destinations->size(); ++i) {
      const OutputDestination& dest = (*destinations)[i];
      if (dest.data == nullptr || dest.on_host) continue;
      const std::string action =
          "writing output " + std::to_string(i) + " of method '" + name_ + "' of";
      auto copies = device_copies();
      if (!copies.ok()) return copies.take_status().at(action, path);
      if (!copies.value()->memory().is_device_pointer(dest.data)) {
        char address[32];
        std::snprintf(address, sizeof(address), "%p", dest.data);
        return Status(Error::InvalidArgument,
                      spec_.outputs[i].name + ": its destination " + address + " is not " +
                          copies.value()->memory().kind() + " device memory")
            .at(action, path);
      }
    }
  }
  if (!unplanned_outputs_) return Status();
  for (size_t i = 0; i < spec_.outputs.size(); ++i) {
    const TensorSpec& spec = spec_.outputs[i];
    if (!spec.is_tensor || spec.memory_planned) continue;
    const OutputDestination* dest = destinations != nullptr && (*destinations)[i].data != nullptr
                                        ? &(*destinations)[i]
                                        : nullptr;
    const std::string action =
        "setting output " + std::to_string(i) + " of method '" + name_ + "' of";
    void* data = nullptr;
    size_t nbytes = spec.nbytes;
    // Host memory may take any writer's output; device memory only a device delegate's.
    if (dest != nullptr &&
        (dest->on_host || route_device_output(false, spec.written_by_device_delegates_only,
                                              false) == DeviceOutputRoute::Bound)) {
      if (dest->nbytes < spec.nbytes) {
        return Status(Error::InvalidArgument,
                      spec.name + ": its destination holds " + std::to_string(dest->nbytes) +
                          " bytes, the output needs up to " + std::to_string(spec.nbytes))
            .at(action, path);
      }
      data = dest->data;  // written there (a delegate stages it only off a boundary)
      nbytes = dest->nbytes;
    } else {
      ETHOST_ASSIGN_OR_RETURN(data, output_buffers_[i].reserve(spec.nbytes));
    }
    Error status = method_->set_output_data_ptr(data, nbytes, i);
    if (status != Error::Ok) return from_executorch(status, action, path);
  }
  return Status();
}

Outcome<OutputBuffer> MethodInstance::write_output(size_t index,
                                                   const OutputDestination& destination,
                                                   std::vector<DeviceOutputRoute>& routes) {
  const std::string action =
      "writing output " + std::to_string(index) + " of method '" + name_ + "' of";
  const std::string& path = program_->path();
  const TensorSpec& spec = spec_.outputs[index];
  const EValue& value = method_->get_output(index);
  if (!value.isTensor()) {
    return Status(Error::InvalidArgument,
                  spec.name + " is not a tensor, so it cannot be written into a destination")
        .at(action, path);
  }
  const Tensor& tensor = value.toTensor();
  OutputBuffer out;
  out.in_destination = true;
  out.dtype = tensor.scalar_type();
  out.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
  size_t nbytes = tensor.nbytes();
  if (destination.nbytes < nbytes) {
    return Status(Error::InvalidArgument, spec.name + ": its destination holds " +
                                              std::to_string(destination.nbytes) +
                                              " bytes, the output needs " + std::to_string(nbytes))
        .at(action, path);
  }
  const void* source = tensor.const_data_ptr();
  bool on_device = arenas_->on_device(source);
  if (destination.on_host) {  // not a device route: nothing is counted
    Status copied;
    if (source != destination.data && nbytes > 0) {
      if (on_device) {
        copied = device_copies_->to_host(destination.data, source, nbytes);
      } else {
        std::memmove(destination.data, source, nbytes);
      }
    }
    if (!copied.ok()) {
      copied.reason = "copying it into its destination: " + copied.reason;
      return copied.at(action, path);
    }
    return out;
  }
  DeviceOutputRoute route = source == destination.data
                                ? DeviceOutputRoute::Bound
                                : route_device_output(true, false, on_device);
  Status copied;
  if (route == DeviceOutputRoute::DeviceToDevice) {
    copied = device_copies_->device_to_device(destination.data, source, nbytes);
  } else if (route == DeviceOutputRoute::FromHost && nbytes > 0) {
    const auto& memory = device_copies_->shared_memory();
    if (output_buffers_[index].holds(source)) {
      output_buffers_[index].lock_for_copies(memory);  // an output left out of planning
    } else {
      arenas_->pin_for_copies(source, memory);  // a planned output's
    }
    copied = device_copies_->to_device(destination.data, source, nbytes);
  }
  if (!copied.ok()) {
    copied.reason = "copying it into its destination: " + copied.reason;
    return copied.at(action, path);
  }
  routes.push_back(route);
  return out;
}

Outcome<std::vector<OutputBuffer>> MethodInstance::run(
    std::vector<InputBinding>& inputs, const std::vector<OutputDestination>* destinations) {
  // Counted in flight (and, for a suspect, alone on the device) until it ends; a failure is
  // told while it is still in flight, so a sticky fault names who was executing.
  ExecuteRegistry::Running running(ExecuteRegistry::process(), program_->executes());
  auto begun = std::chrono::steady_clock::now();
  Outcome<std::vector<OutputBuffer>> outcome = run_timed(inputs, destinations);
  if (!outcome.ok() && outcome.status().code != Error::InvalidArgument) {
    running.failed([] {
      auto memory = ethost_device::active_memory();
      return memory.ok() ? memory.value()->context_health() : Status();
    });
  }
  auto took = std::chrono::steady_clock::now() - begun;
  last_run_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(took).count(),
                     std::memory_order_relaxed);
  return outcome;
}

Outcome<std::vector<OutputBuffer>> MethodInstance::run_timed(
    std::vector<InputBinding>& inputs, const std::vector<OutputDestination>* destinations) {
  const std::string& path = program_->path();
  // TensorImpls point into `inputs`, which is not resized while they live; a deque never moves
  // its elements, so the Tensors handed to set_input stay valid.
  std::deque<TensorImpl> impls;
  clear_last_log_error();
  Status failed = finish_device_copies(set_inputs(inputs, impls), "inputs");
  ETHOST_RETURN_IF_ERROR(failed);
  if (destinations != nullptr || unplanned_outputs_)
    ETHOST_RETURN_IF_ERROR(set_outputs(destinations));
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
  std::vector<DeviceOutputRoute> routes;
  for (size_t i = 0; i < method_->outputs_size() && failed.ok(); ++i) {
    if (destinations != nullptr && (*destinations)[i].data != nullptr) {
      auto written = write_output(i, (*destinations)[i], routes);
      if (written.ok()) {
        outputs.push_back(written.take());
      } else {
        failed = written.take_status();
      }
      continue;
    }
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
  for (DeviceOutputRoute route : routes) count_device_output(route);
  return outputs;
}

}  // namespace ethost
