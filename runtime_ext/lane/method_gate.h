// One model method's instances as both the engine's Python scheduler and the native lane use
// them, and what the lane must know before it may run a request at once.
//
// The Python side (service/dataplane/model_pool.py) keeps its own free list and queue; the lane
// runs a request only where Python would have run it without a wait: the method is open, an
// instance is free, and nobody is waiting for one. The recent execute time (shared, so that
// either side's executes count) says whether the lane runs it on the link thread or a worker. The
// instance's own claim (MethodInstance::try_acquire) decides who runs it: the lane takes only
// an unclaimed one and never waits, and Python, finding an instance the lane holds for its few
// microseconds, waits for it (host execute(gate=...)) counted as waiting, so the lane stops
// taking new ones meanwhile. A lane request to a method whose instances are all taken waits for
// the next one freed (claim_or_wait), in arrival order, as Python's own requests would wait.
#pragma once

#include "method_instance.h"
#include "tensor_io.h"

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace ethost::lane {

// What the lane needs of an instance; MethodInstance in the server, fakes in tests.
class Runnable {
 public:
  virtual ~Runnable() = default;
  virtual bool try_acquire() = 0;
  virtual void release() = 0;
  // GIL-free, under the claim: MethodInstance::run.
  virtual Outcome<std::vector<OutputBuffer>> run(
      std::vector<InputBinding>& inputs, const std::vector<OutputDestination>* destinations) = 0;
  // How long the last run took (MethodInstance::last_run_ns).
  virtual uint64_t last_run_ns() const = 0;
};

class InstanceRunnable final : public Runnable {
 public:
  explicit InstanceRunnable(std::shared_ptr<MethodInstance> instance)
      : instance_(std::move(instance)) {}
  bool try_acquire() override { return instance_->try_acquire(); }
  void release() override { instance_->release(); }
  Outcome<std::vector<OutputBuffer>> run(
      std::vector<InputBinding>& inputs,
      const std::vector<OutputDestination>* destinations) override {
    return instance_->run(inputs, destinations);
  }
  uint64_t last_run_ns() const override { return instance_->last_run_ns(); }

 private:
  std::shared_ptr<MethodInstance> instance_;
};

class MethodGate {
 public:
  explicit MethodGate(std::vector<std::shared_ptr<Runnable>> instances)
      : instances_(std::move(instances)) {}

  // A free instance, now claimed by the caller (give it back with release()), or null.
  Runnable* claim();

  // Called with an instance claimed for it: one free now, else the next one released (a
  // waiter holds nothing meanwhile); with null if the gate closes first.
  using Waiter = std::function<void(Runnable*)>;
  void claim_or_wait(Waiter waiter);
  // Gives a claimed instance back, or hands it on, still claimed, to the first waiter.
  void release(Runnable* instance);
  // Hands instances freed elsewhere (the Python side's executes) to waiters.
  void poke();
  size_t waiters() const;

  // Folds an execute's time into the recent execute time: the moving average of the shorter
  // of each two, so one execute stretched by a preemption does not count (as the Python side
  // did before this was shared).
  void observe(uint64_t took_ns);
  // Nanoseconds; negative before the first execute.
  double recent_ns() const { return recent_ns_.load(std::memory_order_relaxed); }

  // Whether the lane may run a request now: open, nobody waiting for an instance in Python, and
  // at least one execute seen (the first runs in Python, which measures it).
  bool open_for_lane() const;
  // Whether its executes are short enough (below `inline_ns`) to run on the link thread.
  bool short_for_lane(double inline_ns) const { return recent_ns() < inline_ns; }

  void add_waiting(int delta) { waiting_.fetch_add(delta, std::memory_order_acq_rel); }
  int waiting() const { return waiting_.load(std::memory_order_acquire); }
  // Refuses the lane from now on; waiters are called with null.
  void close();
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  size_t size() const { return instances_.size(); }

 private:
  std::vector<std::shared_ptr<Runnable>> instances_;
  std::atomic<double> recent_ns_{-1.0};
  std::atomic<uint64_t> last_ns_{0};
  std::atomic<int> waiting_{0};
  std::atomic<bool> closed_{false};
  mutable std::mutex waiting_mutex_;
  std::deque<Waiter> waiters_;
};

}  // namespace ethost::lane
