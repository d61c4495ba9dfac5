// The requests the lane served, kept until the engine's Python side folds them into its one
// ledger (service/dataplane/ledger.py), which the statistics extension and /metrics count from.
// Appending is a short lock per request; once `fold_at` records wait, the log says so once
// (the caller then wakes Python, which drains it).
#pragma once

#include "routes.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace ethost::lane {

struct ServedRecord {
  std::shared_ptr<const Route> route;  // keeps the names alive after the route is replaced
  int front = 0;
  int64_t rows = 1;  // the execute's rows (a batch's: batcher.h)
  uint64_t total_ns = 0, input_ns = 0, infer_ns = 0, output_ns = 0;
  double at = 0;          // seconds since the epoch, when answered
  uint64_t queue_ns = 0;  // waiting in a batch queue
  // Executes this request counts: 1, but 0 for every request of a batch after the first.
  uint32_t executes = 1;
};

class ServedLog {
 public:
  explicit ServedLog(size_t fold_at) : fold_at_(fold_at) {}

  // True when this record brought the log to `fold_at` records.
  bool add(ServedRecord record) {
    std::lock_guard<std::mutex> lock(mutex_);
    records_.push_back(std::move(record));
    return records_.size() == fold_at_;
  }

  std::vector<ServedRecord> drain() {
    std::vector<ServedRecord> out;
    std::lock_guard<std::mutex> lock(mutex_);
    out.swap(records_);
    return out;
  }

  // A request with tensors in clients' shared memory regions, `bound` of them used where they
  // lie (an output copied into its window is not); `answered` false for one whose output was
  // refused after its execute: the engine's Python counts such a request's tensors, as those
  // it bound, but not the request (service/shm/binding.py, service/engine/dispatch.py).
  void count_shm(uint32_t bound, bool answered = true) {
    if (answered) shm_requests_.fetch_add(1, std::memory_order_relaxed);
    shm_tensors_.fetch_add(bound, std::memory_order_relaxed);
  }
  // Outputs copied from the host into CUDA regions' windows (Python counts its own as
  // etrt_shm_copies_total{kind="cuda",reason="from_host"}).
  void count_device_copies(uint32_t copies) {
    shm_to_device_.fetch_add(copies, std::memory_order_relaxed);
  }
  uint64_t shm_requests() const { return shm_requests_.load(std::memory_order_relaxed); }
  uint64_t shm_to_device() const { return shm_to_device_.load(std::memory_order_relaxed); }
  uint64_t shm_tensors() const { return shm_tensors_.load(std::memory_order_relaxed); }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return records_.size();
  }

 private:
  const size_t fold_at_;
  mutable std::mutex mutex_;
  std::vector<ServedRecord> records_;
  std::atomic<uint64_t> shm_requests_{0}, shm_tensors_{0}, shm_to_device_{0};
};

}  // namespace ethost::lane
