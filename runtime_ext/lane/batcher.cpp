// The lane's batch queue (batcher.h): requests in, batches out to the workers when an instance
// is free for them (batch_run.cpp runs them).
#include "batcher.h"

#include "clock.h"
#include "window_copies.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>

namespace ethost::lane {
namespace {

using limits::align_up;

// Requests merge when every input has the same dims past dim 0 (and so the same dtype: one
// route's).
bool same_key(const BatchEntry& a, const BatchEntry& b) {
  for (size_t i = 0; i < a.bindings.size(); ++i) {
    const InputBinding& x = a.bindings[i];
    const InputBinding& y = b.bindings[i];
    if (x.ndim != y.ndim || x.on_device != y.on_device) return false;
    for (size_t d = 1; d < x.ndim; ++d) {
      if (x.sizes[d] != y.sizes[d]) return false;
    }
  }
  return true;
}

// Scratch room a batch of these inputs' bytes needs besides its outputs' bounds.
uint64_t output_room(const Route& route) {
  uint64_t total = 0;
  for (uint64_t most : route.most_bytes) total += align_up(most);
  return total;
}

}  // namespace

Batcher::Batcher(std::shared_ptr<MethodGate> gate, BatchPolicy policy, Workers& workers,
                 ServedLog& log)
    : gate_(std::move(gate)), policy_(std::move(policy)), workers_(workers), log_(log) {
  largest_preferred_ = policy_.preferred.empty()
                           ? policy_.max_batch
                           : *std::max_element(policy_.preferred.begin(), policy_.preferred.end());
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "etrt-batcher");
    form();
  });
}

Batcher::~Batcher() {
  stop();
}

bool Batcher::submit(std::unique_ptr<BatchEntry> entry) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return false;
    queue_.push_back(std::move(entry));
  }
  arrived_.notify_one();
  return true;
}

bool Batcher::forget(uint64_t waiter) {
  std::unique_ptr<BatchEntry> found;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto at = std::find_if(queue_.begin(), queue_.end(),
                           [waiter](const auto& entry) { return entry->waiter == waiter; });
    if (at == queue_.end()) return false;
    found = std::move(*at);
    queue_.erase(at);
  }
  arrived_.notify_one();  // the head may have changed
  return true;            // the caller hands it to Python and counts it out of flight
}

size_t Batcher::depth() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

void Batcher::stop() {
  std::shared_ptr<Claim> claim;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    claim = claim_;
  }
  arrived_.notify_all();
  // A wait at the gate taken back before an instance came: wake the forming thread with none.
  if (claim != nullptr && gate_->forget(claim->waiter)) claim->give(nullptr);
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Batcher::Claim::give(Runnable* instance) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    got = instance;
    called = true;
  }
  ready.notify_all();
}

Runnable* Batcher::claim_instance() {
  if (Runnable* free = gate_->claim()) return free;
  auto claim = std::make_shared<Claim>();
  claim->waiter = gate_->lane_waiter_id();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return nullptr;
    claim_ = claim;
  }
  gate_->claim_or_wait([claim](Runnable* instance) { claim->give(instance); }, claim->waiter);
  {
    // A stop() between the two locks found no wait at the gate to take back: take it here.
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_ && gate_->forget(claim->waiter)) claim->give(nullptr);
  }
  std::unique_lock<std::mutex> lock(claim->mutex);
  claim->ready.wait(lock, [&] { return claim->called; });
  Runnable* got = claim->got;
  lock.unlock();
  std::lock_guard<std::mutex> held(mutex_);
  claim_ = nullptr;
  return got;
}

std::vector<std::unique_ptr<BatchEntry>> Batcher::take(uint64_t now, uint64_t& due) {
  std::vector<std::unique_ptr<BatchEntry>> batch;
  const BatchEntry& head = *queue_.front();
  uint64_t room = output_room(*head.route);
  std::vector<size_t> picked;
  int64_t rows = 0;
  uint64_t bytes = room;
  bool full = false;
  for (size_t i = 0; i < queue_.size(); ++i) {
    const BatchEntry& entry = *queue_[i];
    if (!same_key(entry, head)) continue;
    uint64_t entry_bytes = 0;
    for (uint64_t b : entry.input_bytes) entry_bytes += align_up(b);
    // At most max_batch rows, and what the scratch room takes (lane.cpp checked each alone).
    if (rows + entry.rows > policy_.max_batch ||
        (!picked.empty() && entry_bytes > kScratchMost - std::min(bytes, kScratchMost))) {
      full = true;
      break;
    }
    picked.push_back(i);
    rows += entry.rows;
    bytes += entry_bytes;
  }
  full = full || rows >= policy_.max_batch;
  due = head.begun + policy_.delay_ns;
  if (!(full || rows >= largest_preferred_ || now >= due)) return batch;
  if (!policy_.preferred.empty()) {
    // The longest prefix whose rows are a preferred size; all of them if none is.
    size_t best = 0;
    int64_t sum = 0;
    for (size_t count = 1; count <= picked.size(); ++count) {
      sum += queue_[picked[count - 1]]->rows;
      if (std::find(policy_.preferred.begin(), policy_.preferred.end(), sum) !=
          policy_.preferred.end()) {
        best = count;
      }
    }
    if (best > 0) picked.resize(best);
  }
  for (size_t i : picked) batch.push_back(std::move(queue_[i]));
  queue_.erase(std::remove(queue_.begin(), queue_.end(), nullptr), queue_.end());
  return batch;
}

void Batcher::decline_all() {
  for (auto& entry : queue_) {
    entry->holds.clear();
    entry->replies->waited(entry->request_id);
    entry->replies->declined(*entry->message);
    entry->replies->finished();
  }
  queue_.clear();
}

void Batcher::form() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    arrived_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) break;
    lock.unlock();
    Runnable* instance = claim_instance();
    lock.lock();
    if (instance == nullptr) {  // the gate closed (or stop): Python answers what waits
      decline_all();
      continue;
    }
    std::vector<std::unique_ptr<BatchEntry>> batch;
    while (!stopping_ && !queue_.empty()) {
      uint64_t due = 0;
      batch = take(now_ns(), due);
      if (!batch.empty()) break;
      arrived_.wait_until(lock,
                          std::chrono::steady_clock::time_point(std::chrono::nanoseconds(due)));
    }
    if (batch.empty()) {  // forgotten meanwhile, or stopping
      lock.unlock();
      gate_->release(instance);
      lock.lock();
      continue;
    }
    lock.unlock();
    for (const auto& entry : batch) entry->replies->waited(entry->request_id);
    auto shared = std::make_shared<std::vector<std::unique_ptr<BatchEntry>>>(std::move(batch));
    MethodGate* gate = gate_.get();
    ServedLog* log = &log_;
    workers_.submit([shared, instance, gate, log, keep = gate_] {
      run_batch(std::move(*shared), instance, *gate, *log);
    });
    lock.lock();
  }
  decline_all();
}

}  // namespace ethost::lane
