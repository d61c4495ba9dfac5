// Answers of the fronts' native path, the same bytes the Python path writes for them: the native
// API's JSON, and the v2 answer (JSON, or a JSON header followed by binary outputs), with the
// HTTP head uvicorn and service/front/protocols/http_transport.py write around them.
#pragma once

#include "front_requests.h"
#include "front_table.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace etrt_front {

// An output to answer with: which of the method's, its shape, where its bytes are (null: in
// the client's region the request named for it).
struct Output {
  uint32_t index = 0;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
};

// The region an output was asked into, answered with its name and offset and no data.
struct AnsweredRegion {
  std::string region;  // empty: not in a region
  uint64_t offset = 0;
  bool in_region() const { return !region.empty(); }
};

// What a taken request needs for its answer.
struct AnswerPlan {
  Protocol protocol = Protocol::Native;
  std::string model, method, version;
  bool has_id = false;
  std::string id;
  // Per method output: whether it is sent as binary data (v2), when asked for.
  std::vector<bool> binary;
  // Per method output: the region it is written into (v2 and gRPC; it wins over binary data).
  std::vector<AnsweredRegion> regions;
  // Any tensor of the request, input or output, lies in a region (gRPC then leaves out the
  // empty raw_output_contents entries at the end, as the servicer does).
  bool any_region = false;
  bool keep_alive = true;
};

// A whole answer (a 200) as its pieces: `head` (the HTTP head and the JSON: all of an answer
// without binary outputs; for gRPC the response message without its tensors), then the binary
// outputs' bytes where they lie (the request's arena slot, or bytes the caller keeps), so that
// an image-sized output is not copied on its way to the socket (answer_send.h) or into the
// message grpcio sends. `framing` holds what goes between them (gRPC's field heads).
struct AnswerBytes {
  std::string head;
  std::vector<std::string_view> binary;
  std::string framing;

  size_t size() const;
  // All of it in one string (a caller without a socket to write to).
  void append_to(std::string& out) const;
};

// The answer. `default_headers`: uvicorn's (date, server), each line with its CRLF. `outputs`
// in the method's order; `spec` the method's outputs. `out.binary` points into `outputs`' data.
void write_answer(const AnswerPlan& plan, const std::vector<TensorSpec>& specs,
                  const std::vector<Output>& outputs, std::string_view default_headers,
                  AnswerBytes& out);

// An output's values as the JSON list the Python path writes (json_tensors.encode_numpy).
void append_json_data(std::string& out, Datatype datatype, const uint8_t* data, uint64_t count);

}  // namespace etrt_front
