// Dynamic batching of the lane's requests (lane.h), for a method whose configuration merges
// requests (dynamic_batching) into a queue with no bound or deadline: the engine's Python side
// would run such a request through its BatchingPolicy (service/dataplane/scheduling/
// batching.py), one Python turn per request on the engine's one thread, which bounds a batched
// model at about 11k requests/s whatever the GPU could take. Here the same policy, configured
// by Python (max_batch, the queue delay, the preferred sizes), merges the requests the fronts'
// link threads bound without Python.
//
// As there: a request queues and waits at most the delay for company; a batch is the queue's
// head and the requests after it with the same dims past dim 0 (the head's key), at most
// max_batch rows, cut to the largest preferred size it reaches; it forms only when an
// instance is free for it (the method's gate, method_gate.h, is the one owner of instances, so
// Python's own batches of the same method take turns with these), so requests that arrive while
// every instance runs wait for the next batch and make it bigger. Its inputs are the requests'
// rows one after the other (copied from where each lies: those in CUDA regions gathered in
// device memory on the thread's stream), its outputs are written into scratch room of their
// bounds and each request gets its own rows, in its front's arena or its client's
// window. A batch the kernels refuse as the inputs' fault runs again in halves (what the host
// refused did not run), down to the request that causes it, so one bad request fails alone and
// its batch-mates are answered; any other failure fails the batch's requests with its Status,
// for Python to word (lane.h: every error answer is made in one place).
#pragma once

#include "lane.h"
#include "method_gate.h"
#include "routes.h"
#include "served_log.h"
#include "shm_regions.h"
#include "tensor_io.h"
#include "wire.h"
#include "workers.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ethost::lane {

struct BatchPolicy {
  int64_t max_batch = 0;
  uint64_t delay_ns = 0;
  std::vector<int64_t> preferred;  // preferred batch sizes (rows), any order
};

// Where one asked output of a batched request goes: its front's arena room, or a window.
struct BatchOutput {
  WireOutput wire;            // index; dims and offset filled in when it is written
  uint8_t* window = nullptr;  // the client's window (a region output), else null
  uint64_t window_bytes = 0;
  const ShmRegion* region = nullptr;
};

// One request in a batch queue: its inputs bound where they lie, its room known.
struct BatchEntry {
  std::shared_ptr<const Route> route;
  Replies* replies = nullptr;
  std::shared_ptr<const std::string> message;  // for Python, should it answer instead
  uint64_t request_id = 0;
  uint64_t waiter = 0;  // its id while queued (forget)
  int front = 0;
  int64_t rows = 0;
  uint64_t begun = 0;  // steady ns when its link thread read it
  std::vector<InputBinding> bindings;
  std::vector<uint64_t> input_bytes;  // each input's bytes where it lies
  uint8_t* arena = nullptr;  // its front's arena; its room is [room_offset, + room_size) there
  uint64_t room_offset = 0, room_size = 0;
  std::vector<BatchOutput> outputs;  // the asked ones, in the method's order
  std::vector<Hold> holds;           // the clients' regions it names, until it is answered
  uint32_t shm_tensors = 0;          // inputs in system regions
  bool in_regions = false;
};

class Batcher {
 public:
  Batcher(std::shared_ptr<MethodGate> gate, BatchPolicy policy, Workers& workers, ServedLog& log);
  ~Batcher();  // stop()
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  const BatchPolicy& policy() const { return policy_; }
  // Queues the request (it stays counted in flight by its link until it is answered); false
  // once stopped (the caller declines it: nothing ran).
  bool submit(std::unique_ptr<BatchEntry> entry);
  // Takes the request queued as `waiter` out (its client went away); false once it is in a
  // batch or was never here.
  bool forget(uint64_t waiter);
  // Hands every queued request back to Python (declined: none ran) and ends the forming
  // thread; batches running finish. Called when the method stops serving here.
  void stop();
  size_t depth() const;

 private:
  void form();  // the forming thread
  // The batch to run now, taken out of the queue (under mutex_); empty while its head may
  // still wait for company, with `due` set to when that wait ends.
  std::vector<std::unique_ptr<BatchEntry>> take(uint64_t now, uint64_t& due);
  Runnable* claim_instance();  // waits for one; null when the gate closed or stop()
  void decline_all();          // under mutex_

  std::shared_ptr<MethodGate> gate_;
  const BatchPolicy policy_;
  int64_t largest_preferred_;
  Workers& workers_;
  ServedLog& log_;

  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::deque<std::unique_ptr<BatchEntry>> queue_;
  bool stopping_ = false;
  // The forming thread's wait for an instance at the gate, while it waits (stop() takes it
  // back from the gate).
  struct Claim {
    uint64_t waiter = 0;
    std::mutex mutex;
    std::condition_variable ready;
    bool called = false;
    Runnable* got = nullptr;
    void give(Runnable* instance);
  };
  std::shared_ptr<Claim> claim_;
  std::thread thread_;
};

// Runs `batch` on `instance` (claimed; given back here) and answers each of its requests
// through its link: the whole of the execute's part, exposed for the unit tests.
void run_batch(std::vector<std::unique_ptr<BatchEntry>> batch, Runnable* instance, MethodGate& gate,
               ServedLog& log);

}  // namespace ethost::lane
