#include "handoffs.h"

namespace ethost::lane {

MethodGate::Waiter Handoffs::waiter(const MethodGate& gate, uint64_t token) {
  Handoffs* self = this;
  const MethodGate* owner = &gate;
  return [self, owner, token](Runnable* instance) {
    self->push(token, instance == nullptr ? -1 : static_cast<int64_t>(owner->index_of(instance)));
  };
}

void Handoffs::push(uint64_t token, int64_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  ready_.emplace_back(token, index);
  if (woken_) return;
  woken_ = true;
  wakeup_.signal();
}

std::vector<std::pair<uint64_t, int64_t>> Handoffs::drain() {
  // Cleared before the swap: a push after it wakes the loop again (as Inbox::drain).
  wakeup_.clear();
  std::vector<std::pair<uint64_t, int64_t>> out;
  std::lock_guard<std::mutex> lock(mutex_);
  out.swap(ready_);
  woken_ = false;
  return out;
}

}  // namespace ethost::lane
