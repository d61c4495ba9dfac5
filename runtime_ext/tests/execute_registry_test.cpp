// The execute registry (execute_registry.h) with fakes for the device: a health function that
// says poisoned or not, threads standing in for concurrent executes. Checked: a sticky fault's
// candidates are the owners in flight when it is first seen (one: the observer; several: all,
// the culprit included even when another observes first), only the first fault is recorded, a
// failure on a working context records nothing, a suspect's execute never overlaps another
// (before or after it began), and a suspect runs shared again after its clean executes.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "check.h"
#include "execute_registry.h"

using ethost::Error;
using ethost::ExecuteOwner;
using ethost::ExecuteRegistry;
using ethost::Status;

namespace {

Status healthy() {
  return Status();
}
Status poisoned() {
  return Status(Error::Internal, "cudaErrorIllegalAddress: fake");
}

bool has(const std::vector<std::string>& labels, const std::string& label) {
  return std::find(labels.begin(), labels.end(), label) != labels.end();
}

void wait_until(const std::atomic<bool>& flag) {
  while (!flag.load()) std::this_thread::sleep_for(std::chrono::microseconds(100));
}

}  // namespace

TEST(a_fault_seen_alone_names_only_the_observer) {
  ExecuteRegistry registry;
  auto bad = registry.enroll("bad");
  auto idle = registry.enroll("idle");
  {
    ExecuteRegistry::Running running(registry, *bad);
    CHECK(bad->in_flight() == 1);
    running.failed(poisoned);
  }
  CHECK(bad->in_flight() == 0);
  auto fault = registry.fault(poisoned);
  CHECK(fault.has_value());
  if (fault) {
    CHECK(fault->candidates == std::vector<std::string>{"bad"});
    CHECK_CONTAINS(fault->reason, "cudaErrorIllegalAddress");
  }
}

TEST(a_failure_on_a_working_context_records_nothing) {
  ExecuteRegistry registry;
  auto model = registry.enroll("model");
  {
    ExecuteRegistry::Running running(registry, *model);
    running.failed(healthy);
  }
  CHECK(!registry.fault(healthy).has_value());
  // Poisoned later with nothing in flight (a load met it): recorded then, with no candidate.
  auto fault = registry.fault(poisoned);
  CHECK(fault.has_value() && fault->candidates.empty());
}

TEST(the_culprit_is_a_candidate_when_another_execute_sees_the_fault_first) {
  ExecuteRegistry registry;
  auto good = registry.enroll("good");
  auto bad = registry.enroll("bad");
  std::atomic<bool> bad_running{false}, good_saw{false};
  std::thread culprit([&] {
    ExecuteRegistry::Running running(registry, *bad);
    bad_running = true;
    wait_until(good_saw);  // its own synchronize comes later
    running.failed(poisoned);
  });
  wait_until(bad_running);
  {
    ExecuteRegistry::Running running(registry, *good);
    running.failed(poisoned);  // the first to see it
    good_saw = true;
  }
  culprit.join();
  auto fault = registry.fault(poisoned);  // the first seen, not the culprit's own later failure
  CHECK(fault.has_value());
  if (fault) {
    CHECK(fault->candidates.size() == 2);
    CHECK(has(fault->candidates, "good") && has(fault->candidates, "bad"));
  }
}

TEST(a_suspect_runs_alone_and_is_cleared_by_clean_executes) {
  ExecuteRegistry registry;
  auto good = registry.enroll("good");
  auto bad = registry.enroll("bad");
  registry.mark_suspect(*bad, 2);
  CHECK(bad->suspect() && registry.suspects() == 1);
  std::atomic<int> running_now{0};
  std::atomic<bool> overlapped{false}, stop{false};
  auto body = [&](ExecuteOwner& owner, bool alone) {
    ExecuteRegistry::Running running(registry, owner);
    int others = running_now.fetch_add(1);
    if (alone && others != 0) overlapped = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (alone && running_now.load() != 1) overlapped = true;
    running_now.fetch_sub(1);
  };
  std::vector<std::thread> goods;
  for (int i = 0; i < 3; ++i) {
    goods.emplace_back([&] {
      while (!stop) body(*good, false);
    });
  }
  body(*bad, true);
  CHECK(bad->suspect());  // one clean execute of two
  body(*bad, true);
  CHECK(!bad->suspect() && registry.suspects() == 0);
  stop = true;
  for (auto& t : goods) t.join();
  CHECK(!overlapped);
}

TEST(a_failed_execute_of_a_suspect_keeps_it_suspect_and_names_it_alone) {
  ExecuteRegistry registry;
  auto good = registry.enroll("good");
  auto bad = registry.enroll("bad");
  registry.mark_suspect(*bad, 1);
  std::atomic<bool> stop{false};
  std::thread traffic([&] {
    while (!stop) {
      ExecuteRegistry::Running running(registry, *good);
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  {
    ExecuteRegistry::Running running(registry, *bad);
    running.failed(poisoned);
  }
  stop = true;
  traffic.join();
  CHECK(bad->suspect());
  auto fault = registry.fault(poisoned);
  CHECK(fault.has_value() && fault->candidates == std::vector<std::string>{"bad"});
  CHECK(!registry.fault(healthy).has_value());  // a context that works again forgets it
}

TEST(a_suspect_marked_while_others_run_unlocked_waits_for_them) {
  ExecuteRegistry registry;
  auto good = registry.enroll("good");
  auto bad = registry.enroll("bad");
  std::atomic<bool> good_in{false}, good_out{false}, overlapped{false};
  std::thread early([&] {
    ExecuteRegistry::Running running(registry, *good);  // no suspect yet: no lock
    good_in = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    good_out = true;
  });
  wait_until(good_in);
  registry.mark_suspect(*bad, 1);
  {
    ExecuteRegistry::Running running(registry, *bad);
    if (!good_out) overlapped = true;
  }
  early.join();
  CHECK(!overlapped);
}
