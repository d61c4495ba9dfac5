// A scripted engine behind the delegate's EngineProvider/Engine/ExecutionContext interfaces, for
// the runner and backend tests. Its "kernel" really runs: at execute it reads each input at its
// bound address and writes every output as the first input + 1 (float32), so a wrong binding or
// a missing staging copy shows up in the results, not only in counters. Every call the runner
// makes is recorded, and each step can be told to fail.
#pragma once

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine_provider.h"

namespace ethost_test {

using ethost_trt::Dims;
using ethost_trt::EngineIo;
using ethost_trt::Error;
using ethost_trt::Outcome;
using ethost_trt::Status;

struct ExecuteRecord {
  bool sent_shapes = false;
  bool sent_addresses = false;
  std::vector<uintptr_t> addresses;  // what the context holds after this call
};

// What the fake engine is and does; the test keeps it and reads the records afterwards.
struct Script {
  std::vector<EngineIo> io;
  ethost_trt::EngineStats stats;
  Status create_context_fails;
  Status infer_fails;
  Status execute_fails;
  // Output shapes from input shapes; by default every output takes the first input's shape.
  std::function<std::vector<Dims>(const std::vector<Dims>&)> output_shapes;

  int contexts = 0;
  int infer_calls = 0;
  int enters = 0;
  int unaligned_claims = 0;
  std::vector<Dims> context_shapes;
  std::vector<uintptr_t> context_addresses;
  std::vector<ExecuteRecord> executes;
};

inline EngineIo tensor(std::string name, bool is_input, Dims shape, std::string dtype = "float32") {
  EngineIo io;
  io.name = std::move(name);
  io.is_input = is_input;
  io.dtype = std::move(dtype);
  io.shape = std::move(shape);
  return io;
}

inline size_t element_count(const Dims& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

class FakeContext final : public ethost_trt::ExecutionContext {
 public:
  explicit FakeContext(Script* script) : s_(script) {}

  Outcome<std::vector<Dims>> infer_shapes(const std::vector<Dims>& inputs) override {
    ++s_->infer_calls;
    if (!s_->infer_fails.ok()) return s_->infer_fails;
    s_->context_shapes = inputs;
    if (s_->output_shapes) return s_->output_shapes(inputs);
    size_t outputs = 0;
    for (const auto& io : s_->io) outputs += io.is_input ? 0 : 1;
    return std::vector<Dims>(outputs, inputs.front());
  }

  Status execute(const ethost_trt::ExecuteCall& call) override {
    ExecuteRecord record;
    record.sent_shapes = call.input_shapes != nullptr;
    record.sent_addresses = call.addresses != nullptr;
    if (call.input_shapes) s_->context_shapes = *call.input_shapes;
    if (call.addresses) s_->context_addresses = *call.addresses;
    record.addresses = s_->context_addresses;
    s_->executes.push_back(record);
    if (!s_->execute_fails.ok()) return s_->execute_fails;
    // out = first input + 1, over the first input's elements.
    const float* in = nullptr;
    size_t n = 0;
    size_t next_input = 0;
    for (size_t e = 0; e < s_->io.size(); ++e) {
      if (!s_->io[e].is_input) continue;
      if (next_input++ == 0) {
        in = reinterpret_cast<const float*>(s_->context_addresses[e]);
        n = element_count(s_->context_shapes.front());
      }
    }
    for (size_t e = 0; e < s_->io.size(); ++e) {
      if (s_->io[e].is_input || s_->io[e].dtype != "float32") continue;
      auto* out = reinterpret_cast<float*>(s_->context_addresses[e]);
      std::vector<float> values(in, in + n);  // an in-place output may alias its input
      for (size_t i = 0; i < n; ++i) out[i] = values[i] + 1.0f;
    }
    return Status();
  }

  std::unique_ptr<ethost_trt::ProviderScope> enter() override {
    ++s_->enters;
    return std::make_unique<ethost_trt::ProviderScope>();
  }

 private:
  Script* s_;
};

class FakeEngine final : public ethost_trt::Engine {
 public:
  explicit FakeEngine(Script* script) : s_(script) {}
  const std::vector<EngineIo>& io() const override { return s_->io; }
  const ethost_trt::EngineStats& stats() const override { return s_->stats; }
  Outcome<std::unique_ptr<ethost_trt::ExecutionContext>> create_context(bool) override {
    if (!s_->create_context_fails.ok()) return s_->create_context_fails;
    ++s_->contexts;
    return std::unique_ptr<ethost_trt::ExecutionContext>(new FakeContext(s_));
  }
  bool claim_unaligned_log() override { return s_->unaligned_claims++ == 0; }

 private:
  Script* s_;
};

// Deserializes any plan into a FakeEngine over `script`, remembering the plan bytes it was given.
class FakeProvider final : public ethost_trt::EngineProvider {
 public:
  explicit FakeProvider(Script* script) : s_(script) {}
  Outcome<std::shared_ptr<ethost_trt::Engine>> deserialize(
      const uint8_t* plan, size_t size, int device_id,
      const ethost_trt::DeserializeOptions& options) override {
    plans.emplace_back(reinterpret_cast<const char*>(plan), size);
    devices.push_back(device_id);
    requests.push_back(options);
    if (!fails.ok()) return fails;
    return std::shared_ptr<ethost_trt::Engine>(new FakeEngine(s_));
  }

  Status fails;
  std::vector<std::string> plans;
  std::vector<int> devices;
  std::vector<ethost_trt::DeserializeOptions> requests;

 private:
  Script* s_;
};

}  // namespace ethost_test
