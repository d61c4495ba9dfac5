// The engine's shortest path for a request, without Python: a request a front checked against a
// route of the current model table (wire.h), whose method is scheduled directly and whose gate
// hands it an instance (method_gate.h: the one owner, which Python claims from too), is bound
// where its inputs lie in the front's arena, executed on that instance with its outputs written
// straight into the room the front reserved, counted (served_log.h) and answered. A short execute
// (under the table's inline_ns) runs on the link thread that read it; a longer one on the lane's
// workers (workers.h), so the link goes on reading meanwhile. One that waits for an instance
// there can still be cancelled (Replies::waiting): its client left, nothing runs for nobody.
//
// It serves exactly the requests the engine's Python side would have run without a wait and
// declines everything else before touching anything: the caller hands a declined message to
// Python unchanged. Declining is only allowed before anything ran: a program may keep state
// across executes (mutable buffers, a KV cache), so a request is executed once. One that fails
// once its instance ran (an execute's error, an output its room could not take) is Failed: the
// caller hands Python the request with the Status, and Python answers it as it answers the same
// failure of its own executes (without running it again), so every error answer is made in one
// place.
//
// A request's tensors may lie in clients' shared memory regions (shm_regions.h), system or CUDA:
// such an input is bound where it lies (a CUDA one as a device address, for the host to bind or
// copy as it does Python's), each region held until its outputs are written. An output is
// written by the execute into its window when that may take the output's upper bound on the
// 256-byte boundary (a CUDA one anywhere: the host routes it); otherwise into scratch room of
// its bound, then copied into the window (a CUDA one on the device's stream), as Python copies
// it. One whose bytes then do not fit (or whose region's object shrank meanwhile)
// ran: it is Failed with an OutputWindow Status carrying the values Python words its refusal
// from. Anything Python would refuse before running (an unknown region, a shrunk object, an
// input's size, a window past the region's end) or copy in (an input off the boundary) is
// declined, so Python words it.
#pragma once

#include "routes.h"
#include "served_log.h"
#include "shm_regions.h"
#include "wire.h"
#include "workers.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace ethost::lane {

// A front's arena as this process maps it.
struct ArenaView {
  uint8_t* base = nullptr;
  size_t size = 0;
};

// Where the outcome of a request run on a worker goes (front_link.h).
class Replies {
 public:
  virtual ~Replies() = default;
  virtual void answered(const std::string& framed) = 0;  // the answer, length prefix included
  virtual void declined(std::string message) = 0;        // the request, for Python
  // The request ran and failed: for Python to answer from `why`.
  virtual void failed(std::string message, Status why) = 0;
  virtual void want_fold() = 0;  // the served log asks to be drained
  virtual void finished() = 0;   // one request on a worker fewer
  // The request waits at `route`'s gate as `waiter` (MethodGate::forget takes it out, if its
  // client goes away before an instance is claimed for it); `message` is the request itself.
  virtual void waiting(uint64_t request_id, std::shared_ptr<const Route> route, uint64_t waiter,
                       std::shared_ptr<const std::string> message) = 0;
  // The request waits no more: an instance was claimed for it, or its gate closed.
  virtual void waited(uint64_t request_id) = 0;
};

class Lane {
 public:
  // `workers`: where longer executes run; null to serve short ones only. `regions`: the clients'
  // shared memory regions requests may name (null: every request naming one is declined).
  Lane(ServedLog& log, Workers* workers, ShmRegions* regions = nullptr)
      : log_(log), workers_(workers), regions_(regions) {}

  enum class Result { Served, Queued, Declined, Failed };

  // Served: the answer was appended (length-prefixed) to `out`, and `fold` set when the served
  // log asks to be drained. Queued: it runs on a worker, which tells `replies` (after the
  // caller counted it in flight: the caller's `started`). Declined: nothing was done. Failed:
  // it ran, and `failure` says how it failed.
  Result serve(const std::shared_ptr<const RouteTable>& table, const uint8_t* message, size_t size,
               const ArenaView& arena, int front, std::string& out, bool& fold, Status& failure,
               Replies* replies);

 private:
  ServedLog& log_;
  Workers* workers_;
  ShmRegions* regions_;
};

}  // namespace ethost::lane
