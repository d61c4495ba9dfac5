// Which programs have an execute in flight, so a sticky GPU fault is blamed on the right model,
// and the suspects' executes run alone on the device.
//
// A sticky CUDA error (an illegal or misaligned address...) is returned to every later CUDA call
// in the process: whichever execute synchronizes first after the fault sees it, often not the
// one whose kernel caused it. What is known for sure is that the culprit's execute was in flight
// then: every execute synchronizes its own stream before it returns, so the one whose kernel
// faulted fails itself and is still running when anyone first sees the error. So the first
// failed execute after which the context no longer works records, as the fault's candidates,
// every program with an execute in flight at that moment (itself included). One candidate: it is
// blamed. Several: nobody is, and each becomes a suspect for the next engine (the service keeps
// that across processes): a suspect's executes take the device exclusively (a readers-writer
// lock, every other execute shared), so a fault during one has exactly one candidate. A suspect
// cleared by enough clean executes runs shared again.
//
// MethodInstance::run is where both execute paths converge (the engine's native lane and the
// service's Python scheduler), so it enters every execute here. With no suspect in the process,
// an execute costs two atomic increments and two decrements, no lock.
#pragma once

#include "status.h"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ethost {

// One program's share: its executes in flight, and whether it is a suspect.
class ExecuteOwner {
 public:
  explicit ExecuteOwner(std::string label) : label_(std::move(label)) {}
  const std::string& label() const { return label_; }
  int in_flight() const { return in_flight_.load(); }
  bool suspect() const { return clean_left_.load() > 0; }

 private:
  friend class ExecuteRegistry;
  const std::string label_;
  std::atomic<int> in_flight_{0};
  std::atomic<int> clean_left_{0};  // > 0: a suspect, with this many clean executes to go
};

// The sticky fault first seen in the process, and who was executing then.
struct StickyFault {
  std::string reason;                   // the device runtime's words
  std::vector<std::string> candidates;  // labels of the programs with an execute in flight
};

class ExecuteRegistry {
 public:
  // The one registry of the process (a device context is per process).
  static ExecuteRegistry& process();

  std::shared_ptr<ExecuteOwner> enroll(std::string label);

  // A suspect until `clean_executes` of its executes succeed (each alone on the device).
  void mark_suspect(ExecuteOwner& owner, int clean_executes);
  int suspects() const { return suspects_.load(); }

  // One execute of `owner`, from construction (it may wait for the device, exclusively for a
  // suspect) to destruction. Call failed() while it lives, before it ends, when the run failed.
  class Running {
   public:
    Running(ExecuteRegistry& registry, ExecuteOwner& owner);
    ~Running();
    Running(const Running&) = delete;
    Running& operator=(const Running&) = delete;
    // The run failed: `health` is asked whether the context still works (the device's
    // context_health); when it does not, and no fault is recorded yet, this records one.
    void failed(const std::function<ethost::Status()>& health);

   private:
    ExecuteRegistry& registry_;
    ExecuteOwner& owner_;
    enum class Held { None, Shared, Exclusive } held_ = Held::None;
    bool clean_ = true;
  };

  // The fault recorded, while `health` says the context is poisoned (None while it works). When
  // none is recorded yet (a load met it, or an execute whose failure came before the fault), it
  // is recorded now with the executes in flight now. A context that works again (only a test's
  // fresh stand-in does) forgets the fault, so a later one is recorded afresh.
  std::optional<StickyFault> fault(const std::function<ethost::Status()>& health);

  // Labels of the programs with an execute in flight now.
  std::vector<std::string> in_flight() const;

 private:
  // Keeps the first fault only: later failures see the same poisoned context.
  void record(const std::string& reason, std::vector<std::string> candidates);
  void forget();
  void lock_shared();
  void unlock_shared();
  void lock_exclusive();
  void unlock_exclusive();

  mutable std::mutex owners_mu_;
  std::vector<std::weak_ptr<ExecuteOwner>> owners_;
  std::optional<StickyFault> fault_;  // under owners_mu_

  std::atomic<int> suspects_{0};
  // Executes running without the lock (no suspect when they began): a suspect waits for them.
  std::atomic<int> unlocked_{0};
  // The readers-writer lock, writer-preferring so a suspect is not starved by a busy model.
  std::mutex lock_mu_;
  std::condition_variable lock_cv_;
  int readers_ = 0;
  int writers_waiting_ = 0;
  bool writer_ = false;
};

}  // namespace ethost
