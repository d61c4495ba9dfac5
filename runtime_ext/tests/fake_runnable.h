// A stand-in for a method instance behind the lane's Runnable interface: "executes" by writing a
// pattern into each output destination it is given, and remembers what it was bound to.
#pragma once

#include "method_gate.h"

#include <atomic>
#include <cstring>
#include <functional>
#include <vector>

namespace ethost_test {

class FakeRunnable final : public ethost::lane::Runnable {
 public:
  bool try_acquire() override { return !busy.exchange(true); }
  void release() override { busy.store(false); }

  ethost::Outcome<std::vector<ethost::OutputBuffer>> run(
      std::vector<ethost::InputBinding>& inputs,
      const std::vector<ethost::OutputDestination>* destinations) override {
    ++runs;
    bound = inputs;
    given = destinations != nullptr ? *destinations : std::vector<ethost::OutputDestination>{};
    if (during) during();
    if (fail) return ethost::Status(executorch::runtime::Error::Internal, "kernel failed");
    std::vector<ethost::OutputBuffer> out(outputs);
    for (size_t i = 0; i < outputs; ++i) {
      out[i].dtype = executorch::aten::ScalarType::Float;
      out[i].shape = {output_elements};
      const ethost::OutputDestination* into =
          destinations != nullptr && i < destinations->size() ? &(*destinations)[i] : nullptr;
      if (into != nullptr && into->data != nullptr && !leave_in_planned) {
        std::memset(into->data, 0x40 + static_cast<int>(i), output_elements * sizeof(float));
        out[i].in_destination = true;
      }
    }
    return out;
  }
  uint64_t last_run_ns() const override { return took_ns; }

  std::atomic<bool> busy{false};
  size_t outputs = 1;
  size_t output_elements = 4;
  uint64_t took_ns = 2000;
  bool fail = false;
  bool leave_in_planned = false;  // returns outputs as host copies, not in their destinations
  std::function<void()> during;   // what else happens while it executes
  int runs = 0;
  std::vector<ethost::InputBinding> bound;
  std::vector<ethost::OutputDestination> given;
};

}  // namespace ethost_test
