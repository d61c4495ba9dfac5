#include "handoffs.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

namespace ethost::lane {

Handoffs::Handoffs() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

Handoffs::~Handoffs() {
  if (fd_ >= 0) close(fd_);
}

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
  uint64_t one = 1;
  ssize_t written;
  do {
    written = write(fd_, &one, sizeof(one));
  } while (written < 0 && errno == EINTR);
}

std::vector<std::pair<uint64_t, int64_t>> Handoffs::drain() {
  // Cleared before the swap: a push after it wakes the loop again (as Inbox::drain).
  uint64_t count;
  ssize_t got;
  do {
    got = read(fd_, &count, sizeof(count));
  } while (got < 0 && errno == EINTR);
  std::vector<std::pair<uint64_t, int64_t>> out;
  std::lock_guard<std::mutex> lock(mutex_);
  out.swap(ready_);
  woken_ = false;
  return out;
}

}  // namespace ethost::lane
