// Instances a method gate hands to requests of the engine's Python side that wait for one
// (method_gate.h): each is queued here under the waiter's token, and an eventfd wakes the event
// loop, which takes them (service/dataplane/handoffs.py). So a Python request waits in the
// gate's one queue, beside the lane's, without holding a thread, and no thread of the lane ever
// takes the GIL to hand it an instance.
#pragma once

#include "method_gate.h"
#include "wakeup.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace ethost::lane {

class Handoffs {
 public:
  Handoffs() = default;
  Handoffs(const Handoffs&) = delete;
  Handoffs& operator=(const Handoffs&) = delete;

  // The eventfd to wait on; -1 if it could not be made (the constructor's only failure).
  int fd() const { return wakeup_.fd(); }
  // A waiter of `gate` (which outlives it: the gate holds it) for the token `token`. This
  // object must outlive every gate it waits at (the engine keeps one for its lifetime).
  MethodGate::Waiter waiter(const MethodGate& gate, uint64_t token);
  // (token, index of the instance handed over, or -1: the gate closed) each, since the last.
  std::vector<std::pair<uint64_t, int64_t>> drain();

 private:
  void push(uint64_t token, int64_t index);

  Wakeup wakeup_;
  std::mutex mutex_;
  std::vector<std::pair<uint64_t, int64_t>> ready_;
  bool woken_ = false;
};

}  // namespace ethost::lane
