// The narrow surface through which the delegate reaches TensorRT. Everything TensorRT-specific
// lives behind it (in Python, see CONTRACT "engine-provider seam"), so the delegate is built and
// tested without TensorRT headers, and production and test providers plug into the same code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memory.h"

namespace ethost_trt {

struct EngineIo {
  std::string name;
  bool is_input = false;
  std::string dtype;            // numpy dtype name
  std::vector<int64_t> shape;   // -1 = dynamic
  std::optional<std::vector<int64_t>> profile_min;  // optimization profile 0
  std::optional<std::vector<int64_t>> profile_max;
};

struct EngineStats {
  int64_t stripped_weights_size = -1;
  int64_t total_weights_size = -1;
  bool refittable = false;
  int64_t device_memory_size = 0;
};

// Failures carry TensorRT's (or the provider's) reason for the log and for Python callers.
struct ProviderError {
  Error code = Error::Ok;
  std::string reason;
  bool ok() const { return code == Error::Ok; }
};

class ExecutionContext {
 public:
  virtual ~ExecutionContext() = default;
  virtual ProviderError set_input_shape(const std::string& name, const std::vector<int64_t>& shape) = 0;
  virtual ProviderError output_shape(const std::string& name, std::vector<int64_t>* shape) = 0;
  virtual ProviderError set_tensor_address(const std::string& name, uintptr_t address) = 0;
  virtual ProviderError enqueue(StreamHandle stream) = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual const std::vector<EngineIo>& io() const = 0;
  virtual const EngineStats& stats() const = 0;
  virtual ProviderError create_context(std::unique_ptr<ExecutionContext>* out) = 0;
  // Set by the first caller that meets an unaligned buffer, so the log says it once per engine.
  virtual bool claim_unaligned_log() = 0;
};

// Deserializes through the provider installed from Python, sharing one Engine per identical
// plan bytes and device across the process.
ProviderError deserialize_engine(const uint8_t* plan, size_t size, int device_id,
                                 std::shared_ptr<Engine>* out);

}  // namespace ethost_trt
