// The delegate's knobs for one load: what the server's model configuration says (set on the
// loading thread, see set_load_options) over what the program baked in at export (its compile
// specs), as upstream's loader orders them: load option > compile spec > default.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "memory.h"

namespace ethost_trt {

struct WeightBudget {
  // Exactly one is set: bytes kept on the device, or a fraction of the streamable weights.
  std::optional<int64_t> bytes;
  std::optional<double> fraction;

  // The bytes for an engine with `streamable` streamable bytes (clamped to it, as TensorRT
  // takes any budget >= the streamable size as "no streaming").
  int64_t resolve(int64_t streamable) const;
  // A stable spelling, part of the shared-engine key: engines with other budgets are others.
  std::string key() const;
};

struct LoadOptions {
  std::optional<WeightBudget> weight_streaming_budget;
  std::optional<bool> use_cuda_graphs;
  std::optional<bool> use_shared_engines;
  // Server-wide (a server flag, passed with every load): contexts take their activation memory
  // from the shared scratch (scratch.h) instead of holding their own.
  std::optional<bool> use_shared_activation_scratch;

  // Fields set here win over `baked`'s.
  LoadOptions over(const LoadOptions& baked) const;
  bool shared_engines() const { return use_shared_engines.value_or(true); }
  bool cuda_graphs() const { return use_cuda_graphs.value_or(false); }
  bool shared_scratch() const { return use_shared_activation_scratch.value_or(false); }
};

// The options of the delegates the calling thread initializes from now on (all loads of a
// device happen on the server's one load thread); reset with LoadOptions{}.
void set_thread_load_options(LoadOptions options);
const LoadOptions& thread_load_options();

// Reads the compile specs upstream's exporter writes: `weight_streaming_budget` (non-negative
// decimal ASCII bytes, nothing else) and `use_cuda_graphs` (b"0" or b"1"). Unknown keys are
// left alone; a malformed or repeated one is InvalidProgram.
class CompileSpecReader {
 public:
  Status add(const std::string& key, const uint8_t* value, size_t size);
  const LoadOptions& options() const { return options_; }

 private:
  LoadOptions options_;
};

}  // namespace ethost_trt
