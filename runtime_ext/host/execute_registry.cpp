#include "execute_registry.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace ethost {

ExecuteRegistry& ExecuteRegistry::process() {
  static ExecuteRegistry* registry = new ExecuteRegistry();  // never destroyed: used at exit
  return *registry;
}

std::shared_ptr<ExecuteOwner> ExecuteRegistry::enroll(std::string label) {
  auto owner = std::make_shared<ExecuteOwner>(std::move(label));
  std::lock_guard<std::mutex> lock(owners_mu_);
  owners_.erase(std::remove_if(owners_.begin(), owners_.end(),
                               [](const std::weak_ptr<ExecuteOwner>& o) { return o.expired(); }),
                owners_.end());
  owners_.push_back(owner);
  return owner;
}

void ExecuteRegistry::mark_suspect(ExecuteOwner& owner, int clean_executes) {
  if (clean_executes <= 0) return;
  if (owner.clean_left_.exchange(clean_executes) == 0) suspects_.fetch_add(1);
}

std::vector<std::string> ExecuteRegistry::in_flight() const {
  std::vector<std::string> labels;
  std::lock_guard<std::mutex> lock(owners_mu_);
  for (const auto& weak : owners_) {
    auto owner = weak.lock();
    if (owner && owner->in_flight() > 0) labels.push_back(owner->label());
  }
  return labels;
}

void ExecuteRegistry::record(const std::string& reason, std::vector<std::string> candidates) {
  std::lock_guard<std::mutex> lock(owners_mu_);
  if (!fault_) fault_ = StickyFault{reason, std::move(candidates)};
}

std::optional<StickyFault> ExecuteRegistry::fault(const std::function<Status()>& health) {
  Status healthy = health();
  if (healthy.ok()) {
    forget();
    return std::nullopt;
  }
  record(healthy.reason, in_flight());
  std::lock_guard<std::mutex> lock(owners_mu_);
  return fault_;
}

void ExecuteRegistry::forget() {
  std::lock_guard<std::mutex> lock(owners_mu_);
  fault_.reset();
}

void ExecuteRegistry::lock_shared() {
  std::unique_lock<std::mutex> lock(lock_mu_);
  lock_cv_.wait(lock, [this] { return !writer_ && writers_waiting_ == 0; });
  ++readers_;
}

void ExecuteRegistry::unlock_shared() {
  std::lock_guard<std::mutex> lock(lock_mu_);
  if (--readers_ == 0) lock_cv_.notify_all();
}

void ExecuteRegistry::lock_exclusive() {
  {
    std::unique_lock<std::mutex> lock(lock_mu_);
    ++writers_waiting_;
    lock_cv_.wait(lock, [this] { return !writer_ && readers_ == 0; });
    --writers_waiting_;
    writer_ = true;
  }
  // Executes that began before there was a suspect run without the lock; they end soon, and a
  // suspect must not overlap them. (Each counts itself before it reads suspects_, and suspects_
  // was raised before this: one of the two sees the other.)
  while (unlocked_.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

void ExecuteRegistry::unlock_exclusive() {
  std::lock_guard<std::mutex> lock(lock_mu_);
  writer_ = false;
  lock_cv_.notify_all();
}

ExecuteRegistry::Running::Running(ExecuteRegistry& registry, ExecuteOwner& owner)
    : registry_(registry), owner_(owner) {
  if (owner.suspect()) {
    registry.lock_exclusive();
    held_ = Held::Exclusive;
  } else {
    registry.unlocked_.fetch_add(1);
    if (registry.suspects_.load() > 0) {
      registry.unlocked_.fetch_sub(1);
      registry.lock_shared();
      held_ = Held::Shared;
    }
  }
  owner.in_flight_.fetch_add(1);
}

ExecuteRegistry::Running::~Running() {
  owner_.in_flight_.fetch_sub(1);
  switch (held_) {
    case Held::Exclusive:
      // One exclusive holder at a time: nobody else counts this owner's clean executes down.
      if (clean_ && owner_.clean_left_.load() > 0 && owner_.clean_left_.fetch_sub(1) == 1) {
        registry_.suspects_.fetch_sub(1);
      }
      registry_.unlock_exclusive();
      break;
    case Held::Shared: registry_.unlock_shared(); break;
    case Held::None: registry_.unlocked_.fetch_sub(1); break;
  }
}

void ExecuteRegistry::Running::failed(const std::function<Status()>& health) {
  clean_ = false;
  // Who is executing now, this one included: the culprit is among them (see the header).
  std::vector<std::string> candidates = registry_.in_flight();
  Status healthy = health();
  if (healthy.ok()) {
    registry_.forget();
  } else {
    registry_.record(healthy.reason, std::move(candidates));
  }
}

}  // namespace ethost
