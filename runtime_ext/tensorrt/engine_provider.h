// The narrow surface through which the delegate reaches TensorRT. Everything TensorRT-specific
// lives behind it (in Python: the service's TensorRTEngineProvider, via provider_module.cpp),
// so the delegate is built and tested without TensorRT headers, and production and test
// providers plug into the same code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "load_options.h"
#include "memory.h"

namespace ethost_trt {

using Dims = std::vector<int64_t>;

struct EngineIo {
  std::string name;
  bool is_input = false;
  std::string dtype;                // numpy dtype name
  Dims shape;                       // -1 = dynamic
  std::optional<Dims> profile_min;  // optimization profile 0
  std::optional<Dims> profile_max;
  // An input whose values (not only its shape) TensorRT needs to infer shapes: the delegate
  // cannot feed those, so an engine having one is refused at load, as upstream's delegate does.
  bool shape_tensor = false;
};

struct EngineStats {
  int64_t stripped_weights_size = -1;
  int64_t total_weights_size = -1;
  bool refittable = false;
  // Bytes one execution context takes on the device (TensorRT's device memory size, after the
  // weight-streaming budget below was applied: it depends on it).
  int64_t device_memory_size = 0;
  // Weights TensorRT can stream from host memory (0: the plan was not built for streaming),
  // and the budget of them kept on the device (-1: none was set, all weights are resident).
  int64_t streamable_weights_size = 0;
  int64_t weight_streaming_budget = -1;
  // Set on a shared engine: what it is shared by (the plan's sha-256 and the budget's key).
  std::string plan_sha256;
  std::string budget_key;

  // Bytes of weights on the device while the engine lives.
  int64_t resident_weights() const {
    int64_t total = total_weights_size > 0 ? total_weights_size : 0;
    if (weight_streaming_budget < 0 || streamable_weights_size <= 0) return total;
    return total - streamable_weights_size + weight_streaming_budget;
  }
};

// How a plan is to be deserialized (the load options that concern the engine itself).
struct DeserializeOptions {
  // One engine per identical plan bytes, device and budget, shared while anyone uses it.
  bool shared = true;
  std::optional<WeightBudget> budget;
};

// Everything one execute hands the provider, in a single call.
struct ExecuteCall {
  // Engine-order input shapes, or null when the context already holds these shapes.
  const std::vector<Dims>* input_shapes = nullptr;
  // Every binding's address in engine order, or null when none changed since the last call.
  const std::vector<uintptr_t>* addresses = nullptr;
  StreamHandle stream = 0;
  // A context with user-managed memory: the shared scratch to bind (0: the one bound already).
  uintptr_t scratch = 0;
  size_t scratch_size = 0;
};

// While alive, keeps the provider entered (a Python provider holds the GIL), so that the calls
// made inside it cost one entry between them.
class ProviderScope {
 public:
  virtual ~ProviderScope() = default;
};

// Failures carry TensorRT's (or the provider's) reason.
class ExecutionContext {
 public:
  virtual ~ExecutionContext() = default;
  // Sets the inputs' shapes (engine input order) and returns the outputs' (engine output order).
  virtual Outcome<std::vector<Dims>> infer_shapes(const std::vector<Dims>& inputs) = 0;
  // Sets what changed, binds what moved and enqueues: the only provider call of a steady call.
  virtual Status execute(const ExecuteCall& call) = 0;
  virtual std::unique_ptr<ProviderScope> enter() = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual const std::vector<EngineIo>& io() const = 0;
  virtual const EngineStats& stats() const = 0;
  // user_managed: the context holds no activation memory; each execute binds some (TensorRT's
  // ExecutionContextAllocationStrategy::kUSER_MANAGED).
  virtual Outcome<std::unique_ptr<ExecutionContext>> create_context(bool user_managed) = 0;
  // Set by the first caller that meets an unaligned buffer, so the log says it once per engine.
  virtual bool claim_unaligned_log() = 0;
};

class EngineProvider {
 public:
  virtual ~EngineProvider() = default;
  // Shares one Engine between identical plans on the same device when `options.shared`, and
  // applies the weight-streaming budget before any context exists (TensorRT's rule).
  virtual Outcome<std::shared_ptr<Engine>> deserialize(const uint8_t* plan, size_t size,
                                                       int device_id,
                                                       const DeserializeOptions& options) = 0;
  // Runs `wait` (a blocking lock) so that it does not hold what the provider's calls need
  // (a Python provider: the GIL) while it blocks.
  virtual void wait_outside(const std::function<void()>& wait) { wait(); }
};

// The provider engines are deserialized with from now on (engines already made keep theirs);
// null uninstalls it.
void set_engine_provider(std::shared_ptr<EngineProvider> provider);
Outcome<std::shared_ptr<Engine>> deserialize_engine(const uint8_t* plan, size_t size, int device_id,
                                                    const DeserializeOptions& options = {});

// CUDA-graph capture must not overlap the creation or destruction of an engine or execution
// context on the device (TensorRT's rule). Loads and destructions hold this shared; a capture
// holds it exclusively, and only tries: a capture that would wait is put off to a later call,
// so no thread ever waits for a capture while holding what the capture needs.
std::shared_lock<std::shared_mutex> engine_lifecycle_shared();
std::unique_lock<std::shared_mutex> try_engine_lifecycle_exclusive();

}  // namespace ethost_trt
