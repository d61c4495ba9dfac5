#include "method_gate.h"

#include <algorithm>

namespace ethost::lane {

Runnable* MethodGate::claim() {
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
  return !closed() && waiting() == 0 && recent_ns() >= 0;
}

void MethodGate::claim_or_wait(Waiter waiter) {
  Runnable* instance = nullptr;
  {
    // Under the lock, so an instance released meanwhile cannot miss this waiter.
    std::lock_guard<std::mutex> lock(waiting_mutex_);
    if (!closed()) {
      instance = claim();
      if (instance == nullptr) {
        waiters_.push_back(std::move(waiter));
        return;
      }
    }
  }
  waiter(instance);
}

void MethodGate::release(Runnable* instance) {
  Waiter next;
  {
    std::lock_guard<std::mutex> lock(waiting_mutex_);
    if (waiters_.empty() || closed()) {
      instance->release();
      return;
    }
    next = std::move(waiters_.front());
    waiters_.pop_front();
  }
  next(instance);  // still claimed: now the waiter's
}

void MethodGate::poke() {
  for (;;) {
    Waiter next;
    Runnable* instance;
    {
      std::lock_guard<std::mutex> lock(waiting_mutex_);
      if (waiters_.empty() || closed() || (instance = claim()) == nullptr) return;
      next = std::move(waiters_.front());
      waiters_.pop_front();
    }
    next(instance);
  }
}

void MethodGate::close() {
  std::deque<Waiter> declined;
  {
    std::lock_guard<std::mutex> lock(waiting_mutex_);
    closed_.store(true, std::memory_order_release);
    declined.swap(waiters_);
  }
  for (auto& waiter : declined) waiter(nullptr);
}

size_t MethodGate::waiters() const {
  std::lock_guard<std::mutex> lock(waiting_mutex_);
  return waiters_.size();
}

}  // namespace ethost::lane
