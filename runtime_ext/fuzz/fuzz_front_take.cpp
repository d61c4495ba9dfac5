// The front's native path over a connection's bytes (FrontLane::take): heads with any framing,
// any body, requests pipelined back to back with extra bytes after them, with and without a
// bearer token, whole or arriving in pieces. Every request it takes consumed bytes it was given
// (an arriving body: its own bytes only), and its lane message reads back (the engine's reader,
// wire.h) with its inputs one after another before its room, inside the arena; then its slot is
// freed.
#include "front_fixture.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

using namespace etrt_front;
using fuzz_fixture::check_message;
using fuzz_fixture::require;

namespace {

// The rest of a body taken before it arrived whole, in pieces of `piece` bytes; false when
// `data` ends first (the request is then abandoned, as by a client that went away).
bool fill_all(fuzz_fixture::Front& front, const std::vector<char>& data, size_t& at,
              FrontLane::Taken& taken, size_t piece) {
  while (!taken.complete) {
    if (at == data.size()) return false;
    size_t offered = std::min(piece, data.size() - at), consumed = 0;
    FrontLane::Fill filled =
        front.lane->fill(taken.id, data.data() + at, offered, consumed, taken.message);
    require(filled != FrontLane::Fill::Unknown, "an arriving request is known");
    require(consumed <= offered && (filled == FrontLane::Fill::Complete || consumed == offered),
            "it takes the body's bytes and no more");
    at += consumed;
    taken.complete = filled == FrontLane::Fill::Complete;
  }
  return true;
}

// Takes what it can of `data`, as a connection's bytes; then every slot must be back. `split`:
// each request is offered half of what is left first and the rest in small pieces (a body may
// be taken before it arrived whole).
void take_all(fuzz_fixture::Front& front, const std::vector<char>& data, bool split) {
  size_t at = 0;
  for (int request = 0; request < 8 && at < data.size(); ++request) {
    FrontLane::Taken taken;
    size_t offered = split ? (data.size() - at + 1) / 2 : data.size() - at;
    if (front.lane->take(data.data() + at, offered, taken) != FrontLane::Take::Taken) {
      break;
    }
    require(taken.consumed > 0 && taken.consumed <= offered, "it took bytes it had");
    require(taken.complete || taken.consumed == offered, "an arriving body takes all it has");
    at += taken.consumed;
    if (!fill_all(front, data, at, taken, 7)) {
      Protocol protocol;
      bool keep_alive;
      require(front.lane->release(taken.id, protocol, keep_alive), "an arriving one is pending");
      break;
    }
    check_message(taken);
    Protocol protocol;
    bool keep_alive;
    require(front.lane->release(taken.id, protocol, keep_alive), "it is pending until released");
  }
  require(front.lane->pending() == 0 && front.slots->in_use() == 0, "every slot came back");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  static fuzz_fixture::Front open;
  static fuzz_fixture::Front guarded("secret");  // for the inputs that carry a token
  std::vector<char> data(bytes, bytes + size);   // its own block: reading past it is a finding
  take_all(open, data, false);
  take_all(open, data, true);
  if (size > 0 && memmem(bytes, size, "uthorization", 12) != nullptr)
    take_all(guarded, data, false);
  return 0;
}
