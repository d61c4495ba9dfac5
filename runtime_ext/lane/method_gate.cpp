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

bool MethodGate::open_for_lane(double inline_ns) const {
  double recent = recent_ns();
  return !closed() && waiting() == 0 && recent >= 0 && recent < inline_ns;
}

}  // namespace ethost::lane
