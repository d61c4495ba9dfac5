// One model method's instances, handed out by one owner to the engine's native lane and to its
// Python scheduler alike: whoever runs a request claims an instance here and gives it back here.
//
// A free instance goes to whoever asks (claim), unless someone is queued; a caller that must
// wait joins one queue, in arrival order, whichever side it comes from (claim_or_wait), and each
// instance given back goes to the first in it (release). A lane request waits holding nothing;
// Python's requests wait on the event loop, woken through Handoffs (an eventfd), so a busy method
// ties up no thread. The recent execute time (either side's executes count) says whether the
// lane runs a request on its link thread or on a worker.
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

  // A free instance, now claimed by the caller (give it back with release()), or null: none
  // free, someone queued for one, or closed.
  Runnable* claim();

  // Called with an instance claimed for it: one free now, else the next one released (a
  // waiter holds nothing meanwhile). `id` 0 or one of lane_waiter_id(): a lane request, called
  // with null if the gate is or closes first. Any other `id`: a Python request, which its
  // scheduler admitted before any close, so it is served even then: a pool that closes
  // finishes what it admitted. forget(id) takes either kind out (its client went away).
  using Waiter = std::function<void(Runnable*)>;
  void claim_or_wait(Waiter waiter, uint64_t id = 0);
  // Takes the waiter `id` out of the queue; false when it was no longer there (it was called).
  bool forget(uint64_t id);
  // A fresh id for a lane request's waiter: Python's ids (counted from 1) never reach them.
  uint64_t lane_waiter_id() {
    return kLaneWaiter | next_lane_id_.fetch_add(1, std::memory_order_relaxed);
  }
  static bool is_lane_waiter(uint64_t id) { return id == 0 || (id & kLaneWaiter) != 0; }
  // Gives a claimed instance back, or hands it on, still claimed, to the first waiter.
  void release(Runnable* instance);
  size_t waiters() const { return queued_.load(std::memory_order_acquire); }

  // Folds an execute's time into the recent execute time: the moving average of the shorter
  // of each two, so one execute stretched by a preemption does not count (as the Python side
  // did before this was shared).
  void observe(uint64_t took_ns);
  // Nanoseconds; negative before the first execute.
  double recent_ns() const { return recent_ns_.load(std::memory_order_relaxed); }

  // Whether the lane may run a request now: open, and at least one execute seen (the first runs
  // in Python, which measures it).
  bool open_for_lane() const;
  // Whether its executes are short enough (below `inline_ns`) to run on the link thread.
  bool short_for_lane(double inline_ns) const { return recent_ns() < inline_ns; }

  // Refuses the lane from now on; its waiters are called with null.
  void close();
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  size_t size() const { return instances_.size(); }
  Runnable* instance(size_t index) const { return instances_[index].get(); }
  // The index of `instance` among this gate's; size() if it is none of them.
  size_t index_of(const Runnable* instance) const;

 private:
  std::vector<std::shared_ptr<Runnable>> instances_;
  std::atomic<double> recent_ns_{-1.0};
  std::atomic<uint64_t> last_ns_{0};
  std::atomic<bool> closed_{false};
  std::atomic<size_t> queued_{0};  // waiters_.size(), read without the lock
  static constexpr uint64_t kLaneWaiter = uint64_t{1} << 63;
  std::atomic<uint64_t> next_lane_id_{1};
  mutable std::mutex waiting_mutex_;
  std::deque<std::pair<uint64_t, Waiter>> waiters_;
};

}  // namespace ethost::lane
