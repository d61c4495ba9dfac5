// A lane request as lane.cpp binds it, before it runs: what serving it alone (lane.cpp) and
// queueing it for a batch (batch_entry.cpp, batcher.h) both read.
#pragma once

#include "lane.h"
#include "method_gate.h"
#include "routes.h"
#include "shm_regions.h"
#include "tensor_io.h"
#include "wire.h"

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

namespace ethost::lane {

// Whether [offset, offset + nbytes) lies in the arena.
inline bool inside(const ArenaView& arena, uint64_t offset, uint64_t nbytes) {
  return offset <= arena.size && nbytes <= arena.size - offset;
}

// An output asked into a window its execute may not write itself (smaller than the output's
// bound, or off the 256-byte boundary): written into scratch room of its bound (at `at`), then
// copied into the window if it fits, as the engine's Python copies such an output.
struct Copied {
  size_t index = 0;
  uint8_t* window = nullptr;
  uint64_t window_bytes = 0;
  const ShmRegion* region = nullptr;
  uint64_t at = 0;
};

// A request ready to run: bound, its room laid out, an instance claimed.
struct Prepared {
  std::shared_ptr<const Route> route;
  uint64_t request_id = 0;
  int front = 0;
  int64_t rows = 1;
  uint64_t begun = 0;
  std::vector<InputBinding> bindings;
  std::vector<OutputDestination> destinations;
  std::vector<WireOutput> answer;
  Runnable* instance = nullptr;
  uint64_t waited_ns = 0;
  std::vector<Hold> holds;   // the clients' regions its tensors lie in, until it is answered
  bool in_regions = false;   // it names any
  uint32_t shm_tensors = 0;  // its inputs bound in system regions
  std::array<bool, kMaxOutputs> in_system_window{};  // outputs the execute writes there
  std::vector<Copied> copied;
  uint64_t scratch_bytes = 0;
};

// A request's references (wire.h), by the tensor each names, with the region it lies in.
struct InRegion {
  const WireShmRef* ref = nullptr;
  const ShmRegion* region = nullptr;
};
struct RegionRefs {
  std::array<InRegion, kMaxInputs> inputs{};
  std::array<InRegion, kMaxOutputs> outputs{};
};

// Queues a bound request to a method that merges (route->batcher), its asked outputs and room
// checked by Lane::serve, for a batch: Queued, or Declined with nothing done.
Lane::Result queue_for_batch(const std::shared_ptr<const Route>& route, const InferRequest& request,
                             Prepared& job, const RegionRefs& refs, const ArenaView& arena,
                             const uint8_t* message, size_t size, Replies* replies);

}  // namespace ethost::lane
