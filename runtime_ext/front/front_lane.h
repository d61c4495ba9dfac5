// The fronts' native path for small inference requests: from the bytes of an HTTP request to the
// engine's lane message, and from the engine's answer to the bytes of the HTTP answer, without
// Python objects per request. The connection stays uvicorn's (service/front/protocols/
// http_transport.py): it offers each request here first, and whatever this declines goes to
// uvicorn's parser as it came.
//
// A request is taken only when it is whole, plain (http_head.h), one of the infer routes, for a
// model method the engine's lane serves, and accepted by the same checks as the Python path's
// (front_requests.h), against a model table whose generation is the engine's now (read from the
// shared control page); its tensors are written into an arena slot (slots.h) with room for the
// outputs. The caller sends the message and keeps the connection's order; the answer (the
// lane's, or the one the engine's Python made for a request the lane declined) becomes the HTTP
// answer here, or, for an error, is written by the Python path from what release() returns.
#pragma once

#include "answer_send.h"
#include "body_stream.h"
#include "front_answers.h"
#include "front_requests.h"
#include "front_table.h"
#include "slots.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace etrt_front {

struct FrontConfig {
  uint64_t max_native_body = 0;  // the native API's JSON body (and every lane body) at most
  uint64_t max_v2_body = 0;      // a v2 body at most
  uint64_t max_json = 0;         // a v2 JSON body or header at most
  // A v2 binary body at most, whole or taken before it has arrived whole (0: none is taken
  // before, and a whole one up to max_v2_body; body_stream.h).
  uint64_t max_streamed_body = 0;
  bool has_token = false;  // inference needs a bearer token
  std::string token;
};

class FrontLane {
 public:
  // `control`: the engine's control page (generation, ready, serving as u64s).
  FrontLane(FrontConfig config, std::shared_ptr<Slots> slots, uint8_t* arena,
            const volatile uint64_t* control);

  void publish(std::shared_ptr<const FrontTable> table) { table_ = std::move(table); }

  enum class Take { Taken, Declined };
  struct Taken {
    uint64_t id = 0;
    size_t consumed = 0;   // bytes of the request (all of `data` while its body is arriving)
    bool complete = true;  // false: its body is still arriving (fill() takes the rest)
    std::string message;   // the lane message to send the engine, once complete
  };
  Take take(const char* data, size_t size, Taken& out);
  // A gRPC ModelInfer request message, whole (grpc_infer.h); grpcio has checked its token.
  // Taken: `out.message` is its lane message and `out.consumed` the message's size.
  Take take_grpc(const uint8_t* data, size_t size, Taken& out);

  // More of the body of request `id`, taken incomplete: its tensors' bytes go into their slot.
  // `consumed`: the bytes of `data` that were its (what follows is the connection's next
  // request); Complete: the body is whole and `message` is its lane message.
  enum class Fill { Arriving, Complete, Unknown };
  Fill fill(uint64_t id, const char* data, size_t size, size_t& consumed, std::string& message);

  // The answer to request `id` from the lane's answer (wire layout, tag included), given to
  // `deliver` while its pieces still lie in its slot; then frees the slot. False: no such
  // request, or an answer that does not read (nothing delivered, nothing freed).
  using Deliver = std::function<void(const AnswerBytes&)>;
  bool answer_lane_to(uint64_t id, const uint8_t* payload, size_t size,
                      std::string_view default_headers, const Deliver& deliver, bool& keep_alive);
  // The same from outputs the engine's Python placed (`outputs`: by index).
  bool answer_to(uint64_t id, std::string_view version, const std::vector<Output>& outputs,
                 std::string_view default_headers, const Deliver& deliver, bool& keep_alive);
  // The HTTP answer to request `id` from the lane's answer (wire layout, tag included); frees
  // its slot. `fd`: the connection's socket, written to directly (answer_send.h), `out` then
  // only what it did not take; -1: all of the answer goes to `out`. False: no such request.
  bool answer_lane(uint64_t id, const uint8_t* payload, size_t size,
                   std::string_view default_headers, std::string& out, bool& keep_alive,
                   int fd = -1);
  // The same from outputs the engine's Python placed (`outputs`: by index).
  bool answer(uint64_t id, std::string_view version, const std::vector<Output>& outputs,
              std::string_view default_headers, std::string& out, bool& keep_alive, int fd = -1);
  // Forgets request `id` and frees its slot (its answer is an error the Python path writes, or
  // nobody's: the client or the engine went away). Its protocol and keep-alive, for that
  // answer. False: no such request.
  bool release(uint64_t id, Protocol& protocol, bool& keep_alive);
  // The method outputs of request `id` by name, for answer().
  int output_index(uint64_t id, std::string_view name) const;

  size_t pending() const { return pending_.size(); }

 private:
  struct Pending {
    AnswerPlan plan;
    std::shared_ptr<const FrontTable> table;  // keeps `method` alive
    const MethodEntry* method = nullptr;
    Slot slot;
    std::shared_ptr<BodyStream> stream;  // while its body arrives (shared: Pending stays copyable)
  };

  // How a request's bytes arrived: all of them (`whole`), or its body still arriving at `body`.
  struct Arrival {
    bool whole = true;
    size_t consumed = 0;  // of the bytes given: the request's, or all of them while arriving
    const char* body = nullptr;
    size_t body_size = 0;
    bool keep_alive = true;
  };
  // Whether requests may be taken against `table`: the engine's generation, and serving.
  bool current(const std::shared_ptr<const FrontTable>& table) const;
  // The request, read by either protocol, checked against the table and placed in a slot.
  Take place(std::shared_ptr<const FrontTable> table, const GivenRequest& request,
             const Arrival& arrival, Taken& out);
  bool finish(Pending& pending, const std::vector<Output>& outputs,
              std::string_view default_headers, const Deliver& deliver);

  FrontConfig config_;
  std::shared_ptr<Slots> slots_;
  uint8_t* arena_;
  const volatile uint64_t* control_;
  std::shared_ptr<const FrontTable> table_;
  std::unordered_map<uint64_t, Pending> pending_;
  uint64_t next_id_ = uint64_t{1} << 48;  // apart from the Python path's ids
};

}  // namespace etrt_front
