// The fronts' native path in plain C++: the HTTP head it takes and the ones it leaves, the JSON
// reader's strictness, the numbers' layout, the request bodies against a method's tensors, and
// the allocator of the arena. (tests/unit/test_front_lane.py compares it with the Python path.)
#include "answer_send.h"
#include "check.h"
#include "front_lane.h"
#include "front_requests.h"
#include "http_head.h"
#include "json_numbers.h"
#include "json_reader.h"
#include "slots.h"
#include "wire.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace etrt_front;

namespace {

Head read(const std::string& text, RequestHead& head) {
  return read_head(text.data(), text.size(), head);
}

MethodEntry method() {
  MethodEntry m;
  m.name = "forward";
  m.route = 3;
  TensorSpec input;
  input.name = "input_0";
  input.datatype = Datatype::F32;
  input.shape = {4, 8};
  input.dynamic = true;
  m.inputs.push_back(input);
  for (const char* name : {"output_0", "output_1"}) {
    TensorSpec output;
    output.name = name;
    output.shape = {4};
    m.outputs.push_back(output);
  }
  return m;
}

// A front over a 64 KiB arena serving model "m": method() with a scalar output "count" added.
struct Front {
  Front() : lane(config(), slots, arena.data(), control) {
    auto table = std::make_shared<FrontTable>();
    table->generation = 1;
    auto entry = std::make_shared<ModelEntry>();
    entry->version = "1";
    MethodEntry m = method();
    TensorSpec count;
    count.name = "count";
    count.datatype = Datatype::I64;
    count.tensor = false;
    m.outputs.push_back(count);
    entry->methods.emplace(m.name, m);
    table->versions[{"m", "1"}] = entry;
    table->defaults["m"] = entry;
    lane.publish(table);
  }

  static FrontConfig config() {
    FrontConfig c;
    c.max_native_body = c.max_v2_body = c.max_json = 1 << 16;
    return c;
  }

  // Takes a native request for [2, 8] floats: its slot starts at 0, its room at 256.
  uint64_t take() {
    std::string body =
        R"({"model": "m", "inputs": [{"shape": [2, 8], "datatype": "FP32", "data": [)"
        R"(0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}]})";
    std::string http = "POST /infer HTTP/1.1\r\ncontent-length: " + std::to_string(body.size()) +
                       "\r\n\r\n" + body;
    FrontLane::Taken taken;
    CHECK(lane.take(http.data(), http.size(), taken) == FrontLane::Take::Taken);
    return taken.id;
  }

  // The engine's answer to `id` as the front reads it (the length prefix left out).
  bool answer(uint64_t id, std::vector<ethost::lane::WireOutput> outputs, std::string& out) {
    std::string message;
    ethost::lane::append_answer(message, id, outputs.data(), outputs.size());
    bool keep_alive = true;
    return lane.answer_lane(id, reinterpret_cast<const uint8_t*>(message.data()) + 4,
                            message.size() - 4, "", out, keep_alive);
  }

  std::vector<uint8_t> arena = std::vector<uint8_t>(64 * 1024);
  std::shared_ptr<Slots> slots = std::make_shared<Slots>(64 * 1024, nullptr, 1 << 30);
  uint64_t control[3] = {1, 1, 1};  // generation, ready, serving
  FrontLane lane;
};

ethost::lane::WireOutput wire_output(uint32_t index, uint64_t offset, std::vector<int64_t> dims) {
  ethost::lane::WireOutput output;
  output.index = index;
  output.offset = offset;
  output.ndim = static_cast<uint32_t>(dims.size());
  std::copy(dims.begin(), dims.end(), output.dims.begin());
  return output;
}

}  // namespace

TEST(a_plain_head_is_read_and_an_unusual_one_left) {
  RequestHead head;
  std::string text =
      "POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 12\r\n"
      "Inference-Header-Content-Length:  7 \r\nConnection: close\r\n\r\nbody";
  CHECK(read(text, head) == Head::Complete);
  CHECK(head.path == "/v2/models/m/infer" && head.content_length == 12 && !head.keep_alive);
  CHECK(head.has_binary_header && head.binary_header == "7");
  CHECK(head.length == text.size() - 4);
  RequestHead partial;
  CHECK(read("POST /infer HTTP/1.1\r\nHost: x\r\n", partial) == Head::Partial);
  for (const char* odd : {
           "GET /infer HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
           "POST /infer HTTP/1.0\r\nContent-Length: 1\r\n\r\n",
           "POST /infer?x=1 HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
           "POST /in%66er HTTP/1.1\r\nContent-Length: 1\r\n\r\n",
           "POST /infer HTTP/1.1\r\n\r\n",
           "POST /infer HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
           "POST /infer HTTP/1.1\r\nContent-Length: 1x\r\n\r\n",
           "POST /infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
           "POST /infer HTTP/1.1\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\n",
           "POST /infer HTTP/1.1\r\nContent-Length: 1\r\nConnection: upgrade\r\n\r\n",
           "POST /infer HTTP/1.1\r\nContent-Length: 1\r\nBad Name: 1\r\n\r\n",
           "POST /infer HTTP/1.1\r\nContent-Length: 1\r\nX: caf\xc3\xa9\r\n\r\n",
       }) {
    RequestHead declined;
    CHECK(read(odd, declined) == Head::Declined);
  }
}

TEST(the_json_reader_refuses_what_it_does_not_read_exactly) {
  const std::string good = R"({"a": [1, -2.5e3, true, null], "b": "x"})";
  JsonReader reader(good.data(), good.data() + good.size());
  CHECK(reader.skip() && reader.at_end());
  for (std::string bad :
       {R"({"a": 01})", R"({"a": "\u0041"})", "{\"a\": \"caf\xc3\xa9\"}", R"({"a": 1,})",
        R"({"a": NaN})", R"({"a": 99999999999999999999})", R"([1] x)"}) {
    JsonReader refusing(bad.data(), bad.data() + bad.size());
    CHECK(!(refusing.skip() && refusing.at_end()));
  }
}

TEST(numbers_are_laid_out_as_orjson_lays_them_out) {
  auto f32 = [](float v) {
    std::string out;
    append_float32(out, v);
    return out;
  };
  auto f64 = [](double v) {
    std::string out;
    append_float64(out, v);
    return out;
  };
  CHECK(f32(0.1f) == "0.1" && f32(3.0f) == "3.0" && f32(-0.0f) == "-0.0");
  CHECK(f32(1e-7f) == "1e-7" && f32(1.2345e-6f) == "0.0000012345");
  CHECK(f32(123456789.0f) == "123456790.0" && f32(1e13f) == "1e+13");
  CHECK(f64(0.1) == "0.1" && f64(1.2345e-6) == "1.2345e-6" &&
        f64(1.2345e15) == "1234500000000000.0");
  CHECK(f64(1e16) == "1e+16" && f64(5e-324) == "5e-324");
}

TEST(a_request_is_bound_to_the_methods_inputs_and_outputs) {
  MethodEntry m = method();
  const std::string body =
      R"({"model": "m", "inputs": [{"name": "input_0", "shape": [2, 8], "datatype": "FP32",)"
      R"( "data": [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]}]})";
  GivenRequest request;
  CHECK(read_native(body.data(), body.size(), request));
  std::array<const GivenInput*, kMaxInputs> ordered;
  uint64_t mask = 0;
  CHECK(etrt_front::bind(request, m, ordered) && ordered[0]->count == 16);
  CHECK(output_mask(request, m, mask) && mask == 0b11);
  std::array<float, 16> values{};
  CHECK(write_values(*ordered[0], reinterpret_cast<uint8_t*>(values.data())));
  CHECK(values[15] == 15.0f);
  request.inputs[0].dims[0] = 5;  // over the upper bound
  CHECK(!etrt_front::bind(request, m, ordered));
  GivenRequest reversed;
  reversed.all_outputs = false;
  reversed.outputs = {{"output_1", -1}, {"output_0", -1}};  // not in the method's order
  CHECK(!output_mask(reversed, m, mask));
}

TEST(binary_inputs_take_the_payload_in_order_and_every_byte_of_it) {
  const std::string header =
      R"({"inputs": [{"name": "input_0", "shape": [1, 8], "datatype": "FP32",)"
      R"( "parameters": {"binary_data_size": 32}}]})";
  std::string body = header + std::string(32, '\0');
  std::string length_text = std::to_string(header.size());
  std::string_view declared(length_text);
  GivenRequest request;
  CHECK(read_v2(body.data(), body.size(), &declared, 1 << 20, request));
  CHECK(request.inputs[0].bytes != nullptr);
  GivenRequest longer;
  std::string extra = body + "x";
  CHECK(!read_v2(extra.data(), extra.size(), &declared, 1 << 20, longer));
  GivenRequest over_limit;
  CHECK(!read_v2(body.data(), body.size(), &declared, 10, over_limit));
}

TEST(slots_are_aligned_first_fit_and_coalesce) {
  Slots slots(16 * 256, nullptr, 1 << 30);
  auto a = slots.allocate(1), b = slots.allocate(300), c = slots.allocate(256);
  CHECK(a && b && c && a->offset == 0 && b->offset == 256 && b->size == 512 && c->offset == 768);
  slots.free(*b);
  auto d = slots.allocate(256);
  CHECK(d && d->offset == 256);  // first fit
  slots.free(*a);
  slots.free(*d);
  slots.free(*c);
  CHECK(slots.in_use() == 0 && slots.free_extents().size() == 1);
  CHECK(!slots.allocate(17 * 256));
}

// Fuzzing found these (issue 36); corpus files of the same names under runtime_ext/fuzz/corpus/.

TEST(regress_wrapping_byte_count_of_a_binary_input_is_refused) {
  // [2^30, 2^30, 4] FP32 is 2^64 bytes: multiplied in 64 bits it was 0, and 0 bytes were taken.
  const std::string header =
      R"({"inputs": [{"name": "x", "shape": [1073741824, 1073741824, 4], "datatype": "FP32",)"
      R"( "parameters": {"binary_data_size": 0}}]})";
  std::string length_text = std::to_string(header.size());
  std::string_view declared(length_text);
  GivenRequest request;
  CHECK(!read_v2(header.data(), header.size(), &declared, 1 << 20, request));
}

TEST(regress_wrapping_json_count_is_refused) {
  // The same count with JSON data: its bytes would have been 0, its values written past them.
  const std::string body =
      R"({"inputs": [{"name": "x", "shape": [1073741824, 1073741824, 4], "datatype": "FP32",)"
      R"( "data": [1, 2]}]})";
  GivenRequest request;
  CHECK(!read_v2(body.data(), body.size(), nullptr, 1 << 20, request));
  GivenRequest native;
  std::string native_body = R"({"model": "m", "inputs": [{"shape": [1073741824, 1073741824, 4],)"
                            R"( "datatype": "FP32", "data": [1]}]})";
  CHECK(!read_native(native_body.data(), native_body.size(), native));
  GivenRequest fits;  // as many values as the shape says: still taken
  std::string exact =
      R"({"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1,2]}]})";
  CHECK(read_v2(exact.data(), exact.size(), nullptr, 1 << 20, fits));
}

TEST(regress_wrapping_answer_size_is_refused) {
  Front front;
  uint64_t id = front.take();
  std::string out;
  // 2^62 FP32 values: 2^64 bytes wrapped to 0 and passed the arena check, then were read.
  CHECK(!front.answer(id, {wire_output(0, 256, {int64_t{1} << 62, 1})}, out));
  CHECK(!front.answer(id, {wire_output(0, 256, {-1, 4})}, out));           // negative: as large
  CHECK(!front.answer(id, {wire_output(0, 64 * 1024 - 8, {1, 4})}, out));  // past the arena
  CHECK(out.empty() && front.lane.pending() == 1);
  CHECK(front.answer(id, {wire_output(0, 256, {1, 4})}, out));
  CHECK_CONTAINS(out, R"("shape":[1,4],"datatype":"FP32","data":[0.0,0.0,0.0,0.0])");
  CHECK(front.lane.pending() == 0 && front.slots->in_use() == 0);
}

TEST(regress_zero_dim_output_is_answered) {
  // A scalar output has no dimensions: its shape was copied with memcpy(nullptr, ..., 0) (UB,
  // found by UBSan; this case fails under the sanitized build if it comes back).
  Front front;
  uint64_t id = front.take();
  int64_t seven = 7;
  std::memcpy(front.arena.data() + 512, &seven, sizeof(seven));
  std::string out;
  CHECK(front.answer(id, {wire_output(0, 256, {2}), wire_output(2, 512, {})}, out));
  CHECK_CONTAINS(out, R"({"name":"count","shape":[],"datatype":"INT64","data":[7]})");
}

TEST(regress_a_slot_larger_than_the_arena_is_refused) {
  // Rounding 2^64 - 1 up to the alignment wrapped to 0: a slot of no bytes was handed out.
  Slots slots(16 * 256, nullptr, 1 << 30);
  CHECK(!slots.allocate(UINT64_MAX) && !slots.allocate(16 * 256 + 1));
  CHECK(slots.allocate(16 * 256) && slots.in_use() == 16 * 256);
}

TEST(a_binary_body_taken_before_it_arrived_is_written_as_it_comes) {
  Front front;
  FrontConfig config = Front::config();
  config.max_streamed_body = 1 << 16;
  FrontLane lane(config, front.slots, front.arena.data(), front.control);
  auto table = std::make_shared<FrontTable>();
  table->generation = 1;
  auto entry = std::make_shared<ModelEntry>();
  entry->version = "1";
  entry->methods.emplace("forward", method());
  table->versions[{"m", "1"}] = entry;
  table->defaults["m"] = entry;
  lane.publish(table);
  std::string header = R"({"inputs":[{"name":"input_0","datatype":"FP32","shape":[4,8],)"
                       R"("parameters":{"binary_data_size":128}}]})";
  std::string payload(128, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i);
  std::string http = "POST /v2/models/m/infer HTTP/1.1\r\ncontent-length: " +
                     std::to_string(header.size() + payload.size()) +
                     "\r\ninference-header-content-length: " + std::to_string(header.size()) +
                     "\r\n\r\n" + header + payload + "NEXT";
  size_t payload_at = http.size() - 4 - payload.size();
  // Cut before the JSON header ends: declined (the Python path reads it from its first byte).
  FrontLane::Taken early;
  CHECK(lane.take(http.data(), payload_at - 1, early) == FrontLane::Take::Declined);
  // Without a streamed limit a body that has not arrived is declined too.
  FrontLane::Taken whole_only;
  CHECK(front.lane.take(http.data(), payload_at + 5, whole_only) == FrontLane::Take::Declined);
  FrontLane::Taken taken;
  CHECK(lane.take(http.data(), payload_at + 5, taken) == FrontLane::Take::Taken);
  CHECK(!taken.complete && taken.message.empty() && taken.consumed == payload_at + 5);
  size_t consumed = 0;
  std::string message;
  CHECK(lane.fill(taken.id, http.data() + payload_at + 5, 50, consumed, message) ==
        FrontLane::Fill::Arriving);
  CHECK(consumed == 50 && message.empty());
  // The rest and the next request's first bytes: only the body's are taken.
  CHECK(lane.fill(taken.id, http.data() + payload_at + 55, 77, consumed, message) ==
        FrontLane::Fill::Complete);
  CHECK(consumed == 73);
  auto read_back =
      ethost::lane::read_request(reinterpret_cast<const uint8_t*>(message.data()), message.size());
  CHECK(read_back.ok() && read_back.value().request_id == taken.id);
  const ethost::lane::WireInput& input = read_back.value().inputs[0];
  CHECK(std::memcmp(front.arena.data() + input.offset, payload.data(), payload.size()) == 0);
  CHECK(input.ndim == 2 && input.dims[0] == 4 && input.dims[1] == 8);
  // Once whole, more bytes are not its.
  CHECK(lane.fill(taken.id, "x", 1, consumed, message) == FrontLane::Fill::Unknown);
  Protocol protocol;
  bool keep_alive;
  CHECK(lane.release(taken.id, protocol, keep_alive) && front.slots->in_use() == 0);
}

TEST(an_answer_goes_to_the_socket_from_where_its_bytes_lie_and_the_rest_comes_back) {
  // A head and two image-sized outputs into a socket whose buffer takes only part of them: what
  // it took, then the rest handed back, are the answer's bytes in order; without a socket, all
  // of it comes back.
  std::string first(300 * 1024, 'a'), second(200 * 1024, 'b');
  for (size_t i = 0; i < first.size(); i += 97) first[i] = static_cast<char>(i);
  AnswerBytes answer;
  answer.head = "HTTP/1.1 200 OK\r\ncontent-length: 512000\r\n\r\n{}";
  answer.binary = {first, std::string_view(), second};
  std::string whole;
  answer.append_to(whole);
  CHECK(whole.size() == answer.size());
  std::string rest;
  CHECK(send_answer(-1, answer, rest) == 0 && rest == whole);

  int pair[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
  int small = 16 * 1024;
  setsockopt(pair[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  fcntl(pair[1], F_SETFL, O_NONBLOCK);
  size_t sent = send_answer(pair[0], answer, rest);
  CHECK(sent > 0 && sent < whole.size() && sent + rest.size() == whole.size());
  std::string received;
  char buffer[65536];
  for (ssize_t n; (n = ::read(pair[1], buffer, sizeof(buffer))) > 0;) received.append(buffer, n);
  CHECK(received.size() == sent && received + rest == whole);

  ::close(pair[1]);  // the peer gone: nothing is written and nothing is lost
  CHECK(send_answer(pair[0], answer, rest) == 0 && rest == whole);
  ::close(pair[0]);
}
