// The engine's shortest path for a request, without Python: a request a front checked against a
// route of the current model table (wire.h), whose method is scheduled directly and may run at
// once (method_gate.h), is bound where its inputs lie in the front's arena, executed on a free
// instance with its outputs written straight into the room the front reserved, counted
// (served_log.h) and answered, all on the link thread that read it (front_link.h).
//
// It serves exactly the requests the engine's Python side would have run at once
// (ModelService.infer_now) and declines everything else before touching anything: the caller
// hands a declined message to Python unchanged. A request that fails on the way (an execute's
// error, an output without room) is declined as well, after its execute: Python runs it again
// and answers the error as it always has, so every error answer is made in one place.
#pragma once

#include "routes.h"
#include "served_log.h"
#include "wire.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace ethost::lane {

// A front's arena as this process maps it.
struct ArenaView {
  uint8_t* base = nullptr;
  size_t size = 0;
};

class Lane {
 public:
  explicit Lane(ServedLog& log) : log_(log) {}

  enum class Result { Served, Declined };

  // Serves the message if it can, appending the answer (length-prefixed) to `out`; `fold` is
  // set when the served log asks to be drained.
  Result serve(const RouteTable* table, const uint8_t* message, size_t size, const ArenaView& arena,
               int front, std::string& out, bool& fold);

 private:
  ServedLog& log_;
};

}  // namespace ethost::lane
