// The model methods the lane may serve, as the engine publishes them at every change to what is
// served: one Route per served model version's method, under the id the fronts' model table
// names it by. A table is immutable once published; link threads take the current one per
// batch of messages, so a table being replaced stays whole for whoever still reads it (and keeps
// its routes' instances alive until then).
#pragma once

#include "method_gate.h"

#include <executorch/runtime/core/exec_aten/exec_aten.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace ethost::lane {

class Batcher;

struct Route {
  uint32_t id = 0;
  // For the statistics the lane's requests are counted in (served_log.h).
  std::string model, version, method;
  std::shared_ptr<MethodGate> gate;
  std::vector<executorch::aten::ScalarType> inputs;  // every input is a tensor of this dtype
  // Per output, the most bytes it can take; 0 where unknown (the lane then leaves the request
  // to Python, which returns such an output as an array).
  std::vector<uint64_t> most_bytes;
  // Per output, the bytes of one row of its bound (0 where unknown): a batched request's room
  // holds its rows' (as its front reserves it).
  std::vector<uint64_t> row_bytes;
  // > 0: dim 0 of every input is the batch, of 1 to max_batch rows.
  int64_t max_batch = 0;
  // Longer executes may run on the lane's workers (lane.h): the method's queue has no bound or
  // deadline that instances held here, unseen by the Python side's queue, would upset.
  bool on_workers = false;
  // The method merges requests (batcher.h): its requests queue there; null for one whose
  // requests each run alone. Kept across tables (it holds the queue) for as long as the method
  // merges here.
  std::shared_ptr<Batcher> batcher;
};

struct RouteTable {
  uint64_t generation = 0;  // of the model state the routes belong to
  double inline_ns = 0;     // executes shorter than this run at once (--inline-execute-us)
  std::unordered_map<uint32_t, std::shared_ptr<const Route>> routes;

  const Route* find(uint32_t id) const {
    auto found = routes.find(id);
    return found == routes.end() ? nullptr : found->second.get();
  }
};

class Routes {
 public:
  void publish(std::shared_ptr<const RouteTable> table) {
    std::lock_guard<std::mutex> lock(mutex_);
    table_ = std::move(table);
  }
  // Null until the first publish.
  std::shared_ptr<const RouteTable> current() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return table_;
  }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const RouteTable> table_;
};

}  // namespace ethost::lane
