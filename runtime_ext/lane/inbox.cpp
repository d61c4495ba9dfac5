#include "inbox.h"

namespace ethost::lane {

void Inbox::wake_locked() {
  if (woken_) return;
  woken_ = true;
  wakeup_.signal();
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

void Inbox::cancelled(int link, std::string payload, bool deadline) {
  std::lock_guard<std::mutex> lock(mutex_);
  items_.push_back(InboxItem{link, std::move(payload), false, {}, true, deadline});
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
  wakeup_.clear();
  std::vector<InboxItem> out;
  std::lock_guard<std::mutex> lock(mutex_);
  out.swap(items_);
  fold = fold_;
  fold_ = false;
  woken_ = false;
  return out;
}

}  // namespace ethost::lane
