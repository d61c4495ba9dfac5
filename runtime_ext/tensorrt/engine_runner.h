// One delegate instance's execution: binds the caller's buffers to a TensorRT execution context,
// staging what TensorRT cannot take as it is (see staging_plan.h). The backend and the
// ExecuTorch-free test entry (ethost_tensorrt.testing.Runner) both drive this same class.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "blob.h"
#include "engine_provider.h"
#include "load_options.h"
#include "memory.h"

namespace ethost_trt {

struct IoArg {
  void* data = nullptr;
  size_t nbytes = 0;
  Dims shape;
  std::string dtype;  // numpy name; empty when the caller does not know it
};

// Gives output argument `arg_index` the shape the engine inferred, updating data and nbytes.
using ResizeOutput = std::function<Status(size_t arg_index, const Dims& shape, IoArg* arg)>;

struct BindingCounters {
  std::string name;
  bool is_input = false;
  uint64_t staging_copies = 0;
  // Of those, the copies of a buffer off the 256-byte boundary: what 256-byte planning (or an
  // aligned request slot) would save. A host buffer on a discrete GPU is copied anyway.
  uint64_t misaligned_copies = 0;
  uint64_t staged_calls = 0;
  uint64_t direct_calls = 0;
  uintptr_t stage_address = 0;
  size_t stage_capacity = 0;
};

// Whether a runner replays CUDA graphs, and why not: the report upstream logs once, kept for
// the model description.
struct GraphReport {
  bool requested = false;
  bool replaying = false;  // a graph is captured for the shapes and addresses of the last call
  std::string reason;      // why it does not replay ("" when it does, or will at the next call)
  uint64_t captures = 0;
  uint64_t failed_captures = 0;
  uint64_t replays = 0;
};

// What a runner serves, named when it is created (see set_instance_owner in backend.h), so that
// its counters can be attributed without guessing.
struct RunnerOrigin {
  std::string owner;   // what the creating thread named it: the server passes the model
  std::string method;  // the method it belongs to
  size_t ordinal = 0;  // its place among the TensorRT delegates of its method instance
};

class EngineRunner {
 public:
  static Outcome<std::unique_ptr<EngineRunner>> create(std::shared_ptr<Engine> engine,
                                                       const BlobMetadata& meta,
                                                       std::shared_ptr<DeviceMemory> memory,
                                                       std::string label,
                                                       const LoadOptions& options = {});
  ~EngineRunner();
  EngineRunner(const EngineRunner&) = delete;
  EngineRunner& operator=(const EngineRunner&) = delete;

  // args: the delegate's arguments, inputs then outputs (aliased outputs possibly elided).
  // Returns only after the stream has drained, whatever happened.
  Status run(std::vector<IoArg>& args, const ResizeOutput& resize);

  std::vector<BindingCounters> counters() const;
  const std::string& label() const { return label_; }
  const RunnerOrigin& origin() const { return origin_; }
  void set_origin(RunnerOrigin origin) { origin_ = std::move(origin); }
  uint64_t calls() const;
  StreamHandle stream() const { return stream_; }
  const Engine& engine() const { return *engine_; }
  const char* memory_kind() const { return memory_->kind(); }
  const LoadOptions& options() const { return options_; }
  GraphReport graphs() const;
  // How many runners (delegate instances, of any model) hold this runner's engine.
  long engine_holders() const { return engine_.use_count(); }
  bool shared_scratch() const { return scratch_bytes_ > 0; }

 private:
  struct Stage {
    void* data = nullptr;
    size_t capacity = 0;
  };

  EngineRunner() = default;
  Outcome<std::vector<int>> check_args(const std::vector<IoArg>& args);
  Outcome<const std::vector<Dims>*> output_shapes(const std::vector<Dims>& inputs,
                                                  std::unique_ptr<ProviderScope>* scope);
  Status resize_outputs(std::vector<IoArg>& args, const std::vector<int>& arg_of,
                        const std::vector<Dims>& shapes, const ResizeOutput& resize);
  Status stage_and_run(std::vector<IoArg>& args, const std::vector<int>& arg_of,
                       const std::vector<Dims>& input_shapes);
  // Enqueues the engine: through the provider, or by replaying the graph captured for these
  // shapes and addresses (capturing it at their second call in a row).
  Status enqueue(ExecuteCall& call, const std::vector<Dims>& input_shapes,
                 const std::vector<uintptr_t>& addresses);
  Status provider_execute(const ExecuteCall& call);
  Status capture(const ExecuteCall& call);
  void drop_graph();

  std::shared_ptr<Engine> engine_;
  std::shared_ptr<DeviceMemory> memory_;
  std::unique_ptr<ExecutionContext> context_;
  StreamHandle stream_ = 0;
  std::string label_;
  RunnerOrigin origin_;
  // Per engine binding (engine order).
  std::vector<int> alias_input_;  // for an in-place output: its input's engine index
  std::vector<bool> updated_in_place_;
  std::vector<size_t> input_order_;   // engine indices of inputs in argument order
  std::vector<size_t> output_order_;  // engine indices of outputs in argument order
  size_t aliased_count_ = 0;
  std::vector<Stage> stages_;
  // Output shapes by input shapes, asked of the provider once per new input shapes.
  std::map<std::vector<Dims>, std::vector<Dims>> shape_cache_;
  // What the execution context holds now, so unchanged shapes and addresses are not resent.
  std::vector<Dims> context_shapes_;
  std::vector<uintptr_t> bound_addresses_;
  LoadOptions options_;
  std::string ineligible_;  // why this runner never replays graphs ("" when it may)
  // The shared activation scratch this runner's context takes (0: the context has its own).
  size_t scratch_bytes_ = 0;
  void* scratch_ = nullptr;        // the buffer claimed for the current call
  void* bound_scratch_ = nullptr;  // the buffer the context holds
  // CUDA graph state: the shapes and addresses of the last provider execute, and the graph
  // captured for them (0: none).
  struct Graph {
    std::vector<Dims> shapes;
    std::vector<uintptr_t> addresses;
    bool warmed = false;
    uintptr_t exec = 0;
  } graph_;
  mutable std::mutex counters_mu_;
  GraphReport graph_report_;
  std::vector<BindingCounters> counters_;
  uint64_t calls_ = 0;
};

struct RunnerCounters {
  std::string label;
  RunnerOrigin origin;
  std::vector<BindingCounters> bindings;
};

// One live runner's engine and knobs, for ethost_tensorrt.engine_reports().
struct RunnerReport {
  std::string label;
  RunnerOrigin origin;
  EngineStats stats;
  bool shared_engines = true;
  bool shared_scratch = false;
  long engine_holders = 0;
  uintptr_t engine_id = 0;  // the same for runners sharing one engine
  GraphReport graphs;
};
std::vector<RunnerReport> all_runner_reports();

// Every live runner's counters, for ethost_tensorrt.staging_counters().
std::vector<RunnerCounters> all_runner_counters();

}  // namespace ethost_trt
