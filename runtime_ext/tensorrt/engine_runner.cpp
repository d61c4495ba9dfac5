#include "engine_runner.h"

#include <algorithm>
#include <set>

#include <executorch/runtime/platform/log.h>

#include "scratch.h"
#include "staging_plan.h"

namespace ethost_trt {
namespace {

std::mutex g_registry_mu;
std::set<const EngineRunner*>& registry() {
  static auto* live = new std::set<const EngineRunner*>();
  return *live;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// Profile 0 is the only one the delegate selects, so its bounds are the accepted input shapes.
Status check_input_shape(const EngineIo& io, const Dims& dims) {
  std::string name = "input '" + io.name + "' shape " + dims_text(dims);
  if (dims.size() != io.shape.size()) {
    return Status(Error::InvalidArgument,
                  name + " does not have the engine's rank " + std::to_string(io.shape.size()));
  }
  for (size_t d = 0; d < dims.size(); ++d) {
    bool fixed_mismatch = io.shape[d] >= 0 && io.shape[d] != dims[d];
    bool below = io.profile_min && d < io.profile_min->size() && dims[d] < (*io.profile_min)[d];
    bool above = io.profile_max && d < io.profile_max->size() && dims[d] > (*io.profile_max)[d];
    if (fixed_mismatch || below || above) {
      std::string bounds = io.profile_min && io.profile_max
                               ? " outside optimization profile 0 [" + dims_text(*io.profile_min) +
                                     ", " + dims_text(*io.profile_max) + "]"
                               : " does not match the engine's " + dims_text(io.shape);
      return Status(Error::InvalidArgument, name + bounds);
    }
  }
  return Status();
}

}  // namespace

Outcome<std::unique_ptr<EngineRunner>> EngineRunner::create(std::shared_ptr<Engine> engine,
                                                            const BlobMetadata& meta,
                                                            std::shared_ptr<DeviceMemory> memory,
                                                            std::string label,
                                                            const LoadOptions& options) {
  const auto& io = engine->io();
  if (io.size() != meta.io_bindings.size()) {
    return Status(Error::InvalidProgram,
                  "the blob names " + std::to_string(meta.io_bindings.size()) +
                      " bindings but the engine has " + std::to_string(io.size()) + " I/O tensors");
  }
  for (const auto& t : io) {
    if (t.is_input && t.shape_tensor) {
      return Status(Error::InvalidProgram, "the engine's input '" + t.name +
                                               "' is a shape tensor, which this delegate "
                                               "cannot feed");
    }
  }
  auto index_of = [&](const std::string& name) -> int {
    for (size_t i = 0; i < io.size(); ++i) {
      if (io[i].name == name) return static_cast<int>(i);
    }
    return -1;
  };
  std::unique_ptr<EngineRunner> r(new EngineRunner());
  r->alias_input_.assign(io.size(), -1);
  r->updated_in_place_.assign(io.size(), false);
  for (const auto& b : meta.io_bindings) {
    int i = index_of(b.name);
    if (i < 0 || io[i].is_input != b.is_input) {
      return Status(Error::InvalidProgram,
                    "the blob's " + std::string(b.is_input ? "input" : "output") + " '" + b.name +
                        "' is not an engine " + (b.is_input ? "input" : "output"));
    }
    (b.is_input ? r->input_order_ : r->output_order_).push_back(static_cast<size_t>(i));
  }
  for (const auto& a : meta.aliased_io) {
    int o = index_of(a.output);
    int i = index_of(a.input);
    r->alias_input_[o] = i;
    r->updated_in_place_[i] = true;
  }
  r->aliased_count_ = meta.aliased_io.size();
  r->options_ = options;
  GraphReport& graphs = r->graph_report_;
  graphs.requested = options.cuda_graphs();
  const EngineStats& stats = engine->stats();
  r->scratch_bytes_ = options.shared_scratch() && stats.device_memory_size > 0
                          ? static_cast<size_t>(stats.device_memory_size)
                          : 0;
  if (!graphs.requested) {
    graphs.reason = "use_cuda_graphs is off";
  } else if (!memory->has_graphs()) {
    graphs.reason = std::string(memory->kind()) + " memory has no CUDA graphs";
  } else if (r->aliased_count_ > 0) {
    graphs.reason = "the engine updates inputs in place (aliased outputs)";
  } else if (stats.weight_streaming_budget >= 0 &&
             stats.weight_streaming_budget < stats.streamable_weights_size) {
    graphs.reason = "the engine streams weights, which makes its enqueue synchronous";
  } else if (r->scratch_bytes_ > 0) {
    graphs.reason = "its context takes the shared activation scratch";
  }
  r->ineligible_ = graphs.reason;
  {
    auto lifecycle = engine_lifecycle_shared();
    ETHOST_ASSIGN_OR_RETURN(r->context_, engine->create_context(r->scratch_bytes_ > 0));
  }
  auto stream = memory->create_stream();
  if (!stream.ok()) {
    Status failed = stream.take_status();
    failed.reason = "could not create a stream: " + failed.reason;
    return failed;
  }
  r->stream_ = stream.value();
  r->engine_ = std::move(engine);
  r->memory_ = std::move(memory);
  r->label_ = std::move(label);
  r->stages_.resize(io.size());
  r->counters_.resize(io.size());
  for (size_t i = 0; i < io.size(); ++i) {
    r->counters_[i].name = io[i].name;
    r->counters_[i].is_input = io[i].is_input;
  }
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    registry().insert(r.get());
  }
  return r;
}

EngineRunner::~EngineRunner() {
  {
    std::lock_guard<std::mutex> lock(g_registry_mu);
    registry().erase(this);
  }
  if (memory_) {
    memory_->synchronize(stream_);
    drop_graph();
    for (auto& s : stages_) memory_->release(s.data);
    memory_->destroy_stream(stream_);
  }
  auto lifecycle = engine_lifecycle_shared();  // no capture while TensorRT objects go
  context_.reset();                            // before the engine it came from
  engine_.reset();
}

Outcome<std::vector<int>> EngineRunner::check_args(const std::vector<IoArg>& args) {
  const auto& io = engine_->io();
  size_t n_in = input_order_.size();
  size_t n_out = output_order_.size();
  bool elided = false;
  if (args.size() == n_in + n_out - aliased_count_ && aliased_count_ > 0) {
    elided = true;
  } else if (args.size() != n_in + n_out) {
    return Status(Error::InvalidArgument,
                  "the delegate got " + std::to_string(args.size()) +
                      " arguments; the engine takes " + std::to_string(n_in) + " inputs and " +
                      std::to_string(n_out) + " outputs (" + std::to_string(aliased_count_) +
                      " of them may be elided in-place outputs)");
  }
  std::vector<int> arg_of(io.size(), -1);
  size_t next = 0;
  for (size_t e : input_order_) arg_of[e] = static_cast<int>(next++);
  for (size_t e : output_order_) {
    if (!(elided && alias_input_[e] >= 0)) arg_of[e] = static_cast<int>(next++);
  }
  for (size_t e : input_order_) {
    const IoArg& a = args[arg_of[e]];
    if (!a.dtype.empty() && a.dtype != io[e].dtype) {
      return Status(Error::InvalidArgument, "input '" + io[e].name + "' is " + a.dtype +
                                                " but the engine takes " + io[e].dtype);
    }
    ETHOST_RETURN_IF_ERROR(check_input_shape(io[e], a.shape));
  }
  for (size_t e : output_order_) {
    int a = arg_of[e];
    if (a >= 0 && !args[a].dtype.empty() && args[a].dtype != io[e].dtype) {
      return Status(Error::InvalidArgument, "output '" + io[e].name + "' is " + args[a].dtype +
                                                " but the engine writes " + io[e].dtype);
    }
  }
  return arg_of;
}

Outcome<const std::vector<Dims>*> EngineRunner::output_shapes(
    const std::vector<Dims>& inputs, std::unique_ptr<ProviderScope>* scope) {
  auto found = shape_cache_.find(inputs);
  if (found != shape_cache_.end()) return &found->second;
  // New input shapes: this call asks the provider twice (infer, then execute), so it enters the
  // provider once for both. Output shapes depend on input shapes alone, hence the cache: the
  // provider refuses data-dependent output shapes, and shape-tensor inputs (whose values would
  // matter) are not supported by this delegate.
  *scope = context_->enter();
  auto inferred = context_->infer_shapes(inputs);
  if (!inferred.ok()) {
    context_shapes_.clear();  // the context may hold some of the new shapes now
    return inferred.take_status();
  }
  std::vector<Dims> shapes = inferred.take();
  if (shapes.size() != output_order_.size()) {
    return Status(Error::Internal, "the engine provider gave " + std::to_string(shapes.size()) +
                                       " output shapes for an engine with " +
                                       std::to_string(output_order_.size()) + " outputs");
  }
  context_shapes_ = inputs;
  constexpr size_t kMaxCachedShapes = 64;  // a bound for callers that vary shapes endlessly
  if (shape_cache_.size() >= kMaxCachedShapes) shape_cache_.clear();
  return &shape_cache_.emplace(inputs, std::move(shapes)).first->second;
}

Status EngineRunner::resize_outputs(std::vector<IoArg>& args, const std::vector<int>& arg_of,
                                    const std::vector<Dims>& shapes, const ResizeOutput& resize) {
  const auto& io = engine_->io();
  size_t k = 0;
  for (size_t e = 0; e < io.size(); ++e) {
    if (io[e].is_input) continue;
    const Dims& shape = shapes[k++];
    int a = arg_of[e];
    if (a < 0) continue;
    ETHOST_RETURN_IF_ERROR(resize(static_cast<size_t>(a), shape, &args[a]));
    if (alias_input_[e] >= 0) {
      const IoArg& in = args[arg_of[alias_input_[e]]];
      if (args[a].nbytes != in.nbytes) {
        return Status(Error::InvalidArgument,
                      "in-place output '" + io[e].name + "' is " + std::to_string(args[a].nbytes) +
                          " bytes but its input is " + std::to_string(in.nbytes));
      }
    }
  }
  return Status();
}

Status EngineRunner::run(std::vector<IoArg>& args, const ResizeOutput& resize) {
  ETHOST_ASSIGN_OR_RETURN(std::vector<int> arg_of, check_args(args));
  // Engine input order, which is also the order the provider takes them in.
  std::vector<Dims> inputs;
  inputs.reserve(input_order_.size());
  const auto& io = engine_->io();
  for (size_t e = 0; e < io.size(); ++e) {
    if (io[e].is_input) inputs.push_back(args[arg_of[e]].shape);
  }
  // Taken before anything is bound and held until the stream has drained (end of this call).
  ScratchClaim scratch;
  if (scratch_bytes_ > 0) {
    auto claimed = claim_shared_scratch(memory_, scratch_bytes_);
    if (!claimed.ok()) return claimed.take_status();
    scratch = claimed.take();
    scratch_ = scratch.data;
  }
  Status ran;
  {
    std::unique_ptr<ProviderScope> scope;
    auto outputs = output_shapes(inputs, &scope);
    ran = status_of(outputs);
    if (ran.ok()) ran = resize_outputs(args, arg_of, *outputs.value(), resize);
    if (ran.ok()) ran = stage_and_run(args, arg_of, inputs);
  }
  // Whatever was queued finishes before the caller may touch its buffers again.
  Status synced = memory_->synchronize(stream_);
  if (ran.ok() && !synced.ok()) {
    synced.reason = "stream synchronize failed: " + synced.reason;
    return synced;
  }
  return ran;
}

Status EngineRunner::stage_and_run(std::vector<IoArg>& args, const std::vector<int>& arg_of,
                                   const std::vector<Dims>& input_shapes) {
  const auto& io = engine_->io();
  size_t n = io.size();
  std::vector<BindingFacts> facts(n);
  for (size_t e = 0; e < n; ++e) {
    BindingFacts& f = facts[e];
    f.is_input = io[e].is_input;
    f.alias_input = alias_input_[e];
    f.updated_in_place = updated_in_place_[e];
    if (arg_of[e] < 0) {
      f.present = false;
      continue;
    }
    const IoArg& a = args[arg_of[e]];
    // Zero-byte tensors may have no storage and get a placeholder; a null buffer that still
    // claims bytes (after outputs took their shapes) would have the engine overrun it.
    if (a.data == nullptr && a.nbytes > 0) {
      return Status(Error::InvalidArgument, std::string(io[e].is_input ? "input '" : "output '") +
                                                io[e].name + "' has " + std::to_string(a.nbytes) +
                                                " bytes but no storage");
    }
    f.address = reinterpret_cast<uintptr_t>(a.data);
    f.nbytes = a.nbytes;
    f.on_device = a.nbytes > 0 && memory_->is_device_pointer(a.data);
  }
  StagingPlan plan = plan_staging(facts, memory_->reads_pageable_host_memory());

  for (size_t e = 0; e < n; ++e) {
    // Any buffer off the boundary is worth one line, whatever else made it staged (a host
    // buffer on a discrete GPU is staged anyway, but would be again on a Jetson).
    if (plan.placement[e] == Placement::Staged && facts[e].address % kBindingAlignment != 0 &&
        engine_->claim_unaligned_log()) {
      ET_LOG(Info,
             "TensorRTBackend %s: %s '%s' at 0x%zx is %zu bytes past a 256-byte boundary; it is "
             "staged through a device buffer (one copy per call). Export with 256-byte memory "
             "planning to avoid this. Logged once per engine.",
             label_.c_str(), io[e].is_input ? "input" : "output", io[e].name.c_str(),
             static_cast<size_t>(facts[e].address),
             static_cast<size_t>(facts[e].address % kBindingAlignment));
    }
    Stage& s = stages_[e];
    if (plan.stage_bytes[e] > s.capacity) {
      memory_->release(s.data);
      s = Stage();
      auto got = memory_->allocate(plan.stage_bytes[e]);
      if (!got.ok()) {
        return Status(Error::MemoryAllocationFailed,
                      "staging buffer for '" + io[e].name + "': " + got.status().reason);
      }
      s.data = got.value();
      s.capacity = plan.stage_bytes[e];
    }
  }

  auto address = [&](const Endpoint& p) -> void* {
    return p.stage ? stages_[p.binding].data : args[arg_of[p.binding]].data;
  };
  auto copy = [&](const PlannedCopy& c) -> Status {
    Status s = memory_->copy_async(address(c.dst), address(c.src), c.nbytes, c.kind, stream_);
    if (!s.ok()) s.reason = "staging copy for '" + io[c.counted_binding].name + "': " + s.reason;
    return s;
  };

  for (const auto& c : plan.before) ETHOST_RETURN_IF_ERROR(copy(c));
  std::vector<uintptr_t> addresses(n);
  for (size_t e = 0; e < n; ++e) addresses[e] = reinterpret_cast<uintptr_t>(address(plan.bound[e]));
  ExecuteCall call;
  call.input_shapes = input_shapes == context_shapes_ ? nullptr : &input_shapes;
  call.addresses = addresses == bound_addresses_ ? nullptr : &addresses;
  call.stream = stream_;
  if (scratch_bytes_ > 0 && scratch_ != bound_scratch_) {
    call.scratch = reinterpret_cast<uintptr_t>(scratch_);
    call.scratch_size = scratch_bytes_;
  }
  ETHOST_RETURN_IF_ERROR(enqueue(call, input_shapes, addresses));
  bound_scratch_ = scratch_;
  if (call.input_shapes) context_shapes_ = input_shapes;
  if (call.addresses) bound_addresses_ = std::move(addresses);
  for (const auto& c : plan.after) ETHOST_RETURN_IF_ERROR(copy(c));

  std::lock_guard<std::mutex> lock(counters_mu_);
  ++calls_;
  for (size_t e = 0; e < n; ++e) {
    if (plan.placement[e] == Placement::Staged) ++counters_[e].staged_calls;
    if (plan.placement[e] == Placement::Direct) ++counters_[e].direct_calls;
    counters_[e].stage_address = reinterpret_cast<uintptr_t>(stages_[e].data);
    counters_[e].stage_capacity = stages_[e].capacity;
  }
  for (const auto* list : {&plan.before, &plan.after}) {
    for (const auto& c : *list) {
      BindingCounters& counted = counters_[c.counted_binding];
      ++counted.staging_copies;
      if (facts[c.counted_binding].address % kBindingAlignment != 0) ++counted.misaligned_copies;
    }
  }
  return Status();
}

std::vector<BindingCounters> EngineRunner::counters() const {
  std::lock_guard<std::mutex> lock(counters_mu_);
  return counters_;
}

uint64_t EngineRunner::calls() const {
  std::lock_guard<std::mutex> lock(counters_mu_);
  return calls_;
}

std::vector<RunnerReport> all_runner_reports() {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  std::vector<RunnerReport> out;
  for (const EngineRunner* r : registry()) {
    out.push_back({r->label(), r->origin(), r->engine().stats(), r->options().shared_engines(),
                   r->shared_scratch(), r->engine_holders(),
                   reinterpret_cast<uintptr_t>(&r->engine()), r->graphs()});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.label < b.label; });
  return out;
}

std::vector<RunnerCounters> all_runner_counters() {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  std::vector<RunnerCounters> out;
  for (const EngineRunner* r : registry()) out.push_back({r->label(), r->origin(), r->counters()});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.label < b.label; });
  return out;
}

}  // namespace ethost_trt
