// The reader of the engine's lane answer (FrontLane::answer_lane) and the HTTP answer written
// from it. Input: one byte choosing a request the front takes first (front_fixture.h's models;
// make_corpus.py lists them), then the answer's bytes (wire.h layout, tag first). Whatever
// offsets and shapes the answer names, the front reads only inside its arena, and an answer it
// writes has a head whose content-length is its body's.
#include "front_fixture.h"
#include "wire.h"

#include <cstdlib>
#include <string>
#include <vector>

using namespace etrt_front;
using fuzz_fixture::require;

namespace {

std::string request(std::string_view path, std::string_view body, std::string_view extra = {}) {
  std::string out = "POST " + std::string(path) + " HTTP/1.1\r\nhost: x\r\n" + std::string(extra);
  out += "content-length: " + std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
  return out;
}

std::vector<std::string> requests() {
  std::string binary_header = R"({"inputs":[{"name":"x","shape":[1,3],"datatype":"FP64",)"
                              R"("parameters":{"binary_data_size":24}}],)"
                              R"("outputs":[{"name":"y","parameters":{"binary_data":true}}]})";
  std::string binary_body = binary_header + std::string(24, '\0');
  return {
      request("/infer", R"({"model":"tiny","inputs":[{"shape":[2,8],"datatype":"FP32",)"
                        R"("data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}]})"),
      request("/v2/models/tiny/infer",
              R"({"id":"q","inputs":[{"name":"input_0","shape":[1,8],"datatype":"FP32",)"
              R"("data":[1,2,3,4,5,6,7,8]}]})"),
      request("/v2/models/pair/infer",
              R"({"inputs":[{"name":"a","shape":[4],"datatype":"INT32","data":[1,2,3,4]},)"
              R"({"name":"b","shape":[4],"datatype":"BOOL","data":[true,false,true,false]}]})"),
      request("/v2/models/fp64/versions/1/infer", binary_body,
              "inference-header-content-length: " + std::to_string(binary_header.size()) + "\r\n"),
      request("/infer", R"({"model":"bool","inputs":[{"shape":[1,3],"datatype":"BOOL",)"
                        R"("data":[true,true,false]}]})"),
  };
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  // A small arena: answers as large as it are written as JSON in every run, and must stay fast.
  static fuzz_fixture::Front front(nullptr, 64 * 1024);
  static const std::vector<std::string> asked = requests();
  if (size < 1) return 0;
  const std::string& http = asked[bytes[0] % asked.size()];
  FrontLane::Taken taken;
  require(front.lane->take(http.data(), http.size(), taken) == FrontLane::Take::Taken,
          "the fixture's requests are taken");
  std::vector<uint8_t> payload(bytes + 1, bytes + size);  // its own block, as the socket gives it
  std::string out;
  bool keep_alive = true;
  if (front.lane->answer_lane(taken.id, payload.data(), payload.size(), "server: fuzz\r\n", out,
                              keep_alive)) {
    size_t head_end = out.find("\r\n\r\n");
    size_t length_at = out.find("\r\ncontent-length: ");
    require(out.rfind("HTTP/1.1 200 OK\r\n", 0) == 0 && head_end != std::string::npos &&
                length_at < head_end,
            "the answer has a head");
    uint64_t length = std::strtoull(out.c_str() + length_at + 18, nullptr, 10);
    require(length == out.size() - head_end - 4, "its content-length is its body's");
  } else {
    Protocol protocol;
    require(front.lane->release(taken.id, protocol, keep_alive),
            "a refused answer's request waits");
  }
  require(front.lane->pending() == 0 && front.slots->in_use() == 0, "every slot came back");
  return 0;
}
