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

// An output to answer with: which of the method's, its shape, where its bytes are.
struct Output {
  uint32_t index = 0;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
};

// What a taken request needs for its answer.
struct AnswerPlan {
  Protocol protocol = Protocol::Native;
  std::string model, method, version;
  bool has_id = false;
  std::string id;
  // Per method output: whether it is sent as binary data (v2), when asked for.
  std::vector<bool> binary;
  bool keep_alive = true;
};

// The whole HTTP answer (a 200). `default_headers`: uvicorn's (date, server), each line with
// its CRLF. `outputs` in the method's order; `spec` the method's outputs.
void write_answer(const AnswerPlan& plan, const std::vector<TensorSpec>& specs,
                  const std::vector<Output>& outputs, std::string_view default_headers,
                  std::string& out);

// An output's values as the JSON list the Python path writes (json_tensors.encode_numpy).
void append_json_data(std::string& out, Datatype datatype, const uint8_t* data, uint64_t count);

}  // namespace etrt_front
