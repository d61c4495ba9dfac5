#include "inbox.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace ethost::lane {

Inbox::Inbox() : fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

Inbox::~Inbox() {
  if (fd_ >= 0) close(fd_);
}

void Inbox::wake_locked() {
  if (woken_) return;
  woken_ = true;
  uint64_t one = 1;
  ssize_t written;
  do {
    written = write(fd_, &one, sizeof(one));
  } while (written < 0 && errno == EINTR);
}

void Inbox::push(int link, std::vector<std::string>& payloads) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& payload : payloads) items_.push_back(InboxItem{link, std::move(payload), false, {}});
  payloads.clear();
  wake_locked();
}

void Inbox::failed(int link, std::string payload, Status why) {
  std::lock_guard<std::mutex> lock(mutex_);
  items_.push_back(InboxItem{link, std::move(payload), false, std::move(why)});
  wake_locked();
}

void Inbox::lost(int link) {
  std::lock_guard<std::mutex> lock(mutex_);
  items_.push_back(InboxItem{link, std::string(), true, {}});
  wake_locked();
}

void Inbox::want_fold() {
  std::lock_guard<std::mutex> lock(mutex_);
  fold_ = true;
  wake_locked();
}

std::vector<InboxItem> Inbox::drain(bool& fold) {
  // Cleared before the swap: a push after the swap wakes the loop again, and one before it is
  // in what this drain returns.
  uint64_t count;
  ssize_t got;
  do {
    got = read(fd_, &count, sizeof(count));
  } while (got < 0 && errno == EINTR);
  std::vector<InboxItem> out;
  std::lock_guard<std::mutex> lock(mutex_);
  out.swap(items_);
  fold = fold_;
  fold_ = false;
  woken_ = false;
  return out;
}

}  // namespace ethost::lane
