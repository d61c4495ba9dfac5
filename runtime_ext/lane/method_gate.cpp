#include "method_gate.h"

#include <algorithm>

namespace ethost::lane {

Runnable* MethodGate::claim() {
  // A newcomer does not pass those queued: what they wait for is handed to them on release.
  if (queued_.load(std::memory_order_acquire) > 0) return nullptr;
  for (const auto& instance : instances_) {
    if (instance->try_acquire()) return instance.get();
  }
  return nullptr;
}

void MethodGate::observe(uint64_t took_ns) {
  // Races between threads lose an update at worst: this is a heuristic, not a count.
  double took = static_cast<double>(took_ns);
  double last = static_cast<double>(last_ns_.exchange(took_ns, std::memory_order_relaxed));
  double recent = recent_ns_.load(std::memory_order_relaxed);
  recent_ns_.store(recent < 0 ? took : 0.8 * recent + 0.2 * std::min(took, last),
                   std::memory_order_relaxed);
}

bool MethodGate::open_for_lane() const {
  return !closed() && recent_ns() >= 0;
}

void MethodGate::claim_or_wait(Waiter waiter, uint64_t id) {
  Runnable* instance = nullptr;
  {
    // Under the lock, so an instance released meanwhile cannot miss this waiter.
    std::lock_guard<std::mutex> lock(waiting_mutex_);
    if (!is_lane_waiter(id) || !closed()) {
      if (waiters_.empty()) {
        for (const auto& candidate : instances_) {
          if (candidate->try_acquire()) {
            instance = candidate.get();
            break;
          }
        }
      }
      if (instance == nullptr) {
        waiters_.emplace_back(id, std::move(waiter));
        queued_.store(waiters_.size(), std::memory_order_release);
        return;
      }
    }
  }
  waiter(instance);
}

bool MethodGate::forget(uint64_t id) {
  std::lock_guard<std::mutex> lock(waiting_mutex_);
  for (auto at = waiters_.begin(); at != waiters_.end(); ++at) {
    if (at->first == id) {
      waiters_.erase(at);
      queued_.store(waiters_.size(), std::memory_order_release);
      return true;
    }
  }
  return false;
}

void MethodGate::release(Runnable* instance) {
  Waiter next;
  {
    std::lock_guard<std::mutex> lock(waiting_mutex_);
    if (waiters_.empty()) {
      instance->release();
      return;
    }
    next = std::move(waiters_.front().second);
    waiters_.pop_front();
    queued_.store(waiters_.size(), std::memory_order_release);
  }
  next(instance);  // still claimed: now the waiter's
}

void MethodGate::close() {
  std::vector<Waiter> declined;
  {
    std::lock_guard<std::mutex> lock(waiting_mutex_);
    closed_.store(true, std::memory_order_release);
    std::deque<std::pair<uint64_t, Waiter>> kept;
    for (auto& waiter : waiters_) {
      if (is_lane_waiter(waiter.first)) {
        declined.push_back(std::move(waiter.second));
      } else {
        kept.push_back(std::move(waiter));
      }
    }
    waiters_.swap(kept);
    queued_.store(waiters_.size(), std::memory_order_release);
  }
  for (auto& waiter : declined) waiter(nullptr);
}

size_t MethodGate::index_of(const Runnable* instance) const {
  for (size_t i = 0; i < instances_.size(); ++i) {
    if (instances_[i].get() == instance) return i;
  }
  return instances_.size();
}

}  // namespace ethost::lane
