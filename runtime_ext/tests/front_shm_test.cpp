// The fronts' native path for v2 requests whose tensors lie in clients' shared memory regions:
// the parameters it reads and the ones it leaves to the Python path, the references its lane
// message carries, and the answer for outputs written into regions.
// (tests/unit/test_front_differential.py compares it with the Python path.)
#include "check.h"
#include "front_lane.h"
#include "front_requests.h"
#include "slots.h"
#include "wire.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

using namespace etrt_front;

namespace {

// A front over a 64 KiB arena serving model "m": input_0 FP32 up to [4, 8], outputs output_0
// and output_1 FP32 [4].
struct Front {
  Front() : lane(config(), slots, arena.data(), control) {
    MethodEntry m;
    m.name = "forward";
    m.route = 3;
    TensorSpec input;
    input.name = "input_0";
    input.shape = {4, 8};
    input.dynamic = true;
    m.inputs.push_back(input);
    for (const char* name : {"output_0", "output_1"}) {
      TensorSpec output;
      output.name = name;
      output.shape = {4};
      m.outputs.push_back(output);
    }
    auto table = std::make_shared<FrontTable>();
    table->generation = 1;
    auto entry = std::make_shared<ModelEntry>();
    entry->version = "1";
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

  bool take(const std::string& body, FrontLane::Taken& taken) {
    std::string http =
        "POST /v2/models/m/infer HTTP/1.1\r\ncontent-length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body;
    return lane.take(http.data(), http.size(), taken) == FrontLane::Take::Taken;
  }

  std::vector<uint8_t> arena = std::vector<uint8_t>(64 * 1024);
  std::shared_ptr<Slots> slots = std::make_shared<Slots>(64 * 1024, nullptr, 1 << 30);
  uint64_t control[3] = {1, 1, 1};  // generation, ready, serving
  FrontLane lane;
};

bool reads(const std::string& body, GivenRequest& request) {
  return read_v2(body.data(), body.size(), nullptr, 1 << 20, request);
}

// A request for [2, 8] floats whose input's parameters are `parameters`.
std::string with_input_parameters(const std::string& parameters, const std::string& more = "") {
  return R"({"inputs": [{"name": "input_0", "shape": [2, 8], "datatype": "FP32", "parameters": )" +
         parameters + more + "}]}";
}

}  // namespace

TEST(region_parameters_are_read_as_the_python_path_reads_them) {
  // The request keeps views into its body: each body outlives its request.
  const std::string body = with_input_parameters(
      R"({"shared_memory_region": "in", "shared_memory_byte_size": 64, "shared_memory_offset": 16})");
  GivenRequest request;
  CHECK(reads(body, request));
  const GivenInput& input = request.inputs[0];
  CHECK(input.shm.region == "in" && input.shm.byte_size == 64 && input.shm.offset == 16);
  CHECK(input.bytes == nullptr && input.data_begin == nullptr);
  const std::string no_offset_body =
      with_input_parameters(R"({"shared_memory_byte_size": 64, "shared_memory_region": "in"})");
  GivenRequest no_offset;  // 0 unless given
  CHECK(reads(no_offset_body, no_offset) && no_offset.inputs[0].shm.offset == 0);
  const std::string output_body =
      R"({"inputs": [{"name": "input_0", "shape": [1, 8], "datatype": "FP32", "data": [)"
      R"(0,1,2,3,4,5,6,7]}], "outputs": [{"name": "output_1", "parameters": {)"
      R"("binary_data": true, "shared_memory_region": "out", "shared_memory_byte_size": 16}}]})";
  GivenRequest output;
  CHECK(reads(output_body, output));
  CHECK(output.outputs[0].shm.region == "out" && output.outputs[0].binary == 1);
}

TEST(region_parameters_the_python_path_refuses_or_words_are_declined) {
  const char* declined[] = {
      R"({"shared_memory_region": "in"})",                               // no byte size
      R"({"shared_memory_byte_size": 64})",                              // no region
      R"({"shared_memory_offset": 0})",                                  // neither
      R"({"shared_memory_region": "", "shared_memory_byte_size": 64})",  // an empty name
      R"({"shared_memory_region": 3, "shared_memory_byte_size": 64})",   // not a string
      R"({"shared_memory_region": "in", "shared_memory_byte_size": 64.0})",
      R"({"shared_memory_region": "in", "shared_memory_byte_size": -64})",
      R"({"shared_memory_region": "in", "shared_memory_byte_size": 64, "shared_memory_offset": -1})",
      R"({"shared_memory_region": "in", "shared_memory_byte_size": 64, "shared_memory_offset": null})",
      R"({"shared_memory_region": "in", "shared_memory_byte_size": 64, "x": 1})",  // unknown key
      R"({"shared_memory_region": "in", "shared_memory_byte_size": 64, "binary_data_size": 64})",
      R"({"shared_memory_region": "i\u006e", "shared_memory_byte_size": 64})",  // an escape
      R"({"shared_memory_region": "in", "shared_memory_region": "in", "shared_memory_byte_size": 64})",
      R"({"shared_memory_region": "in", "shared_memory_byte_size": 60})",  // not [2, 8] FP32's
      R"({"shared_memory_region": "in", "shared_memory_byte_size": 128})",
  };
  for (const char* parameters : declined) {
    GivenRequest request;
    CHECK(!reads(with_input_parameters(parameters), request));
  }
  GivenRequest with_data;  // in a region and in the request
  CHECK(!reads(with_input_parameters(R"({"shared_memory_region": "in",)"
                                     R"( "shared_memory_byte_size": 64})",
                                     R"(, "data": [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15])"),
               with_data));
  GivenRequest classification;
  CHECK(!reads(R"({"inputs": [{"name": "input_0", "shape": [1, 8], "datatype": "FP32", "data": [)"
               R"(0,1,2,3,4,5,6,7]}], "outputs": [{"name": "output_0", "parameters": {)"
               R"("classification": 2, "shared_memory_region": "out",)"
               R"( "shared_memory_byte_size": 16}}]})",
               classification));
}

TEST(references_travel_in_the_lane_message_and_outputs_in_regions_are_answered_without_data) {
  Front front;
  FrontLane::Taken taken;
  CHECK(front.take(R"({"id": "7", "inputs": [{"name": "input_0", "shape": [2, 8], "datatype":)"
                   R"( "FP32", "parameters": {"shared_memory_region": "in",)"
                   R"( "shared_memory_byte_size": 64, "shared_memory_offset": 256}}],)"
                   R"( "outputs": [{"name": "output_0", "parameters": {"shared_memory_region":)"
                   R"( "out", "shared_memory_byte_size": 16}}, {"name": "output_1"}]})",
                   taken));
  auto read_back = ethost::lane::read_request(
      reinterpret_cast<const uint8_t*>(taken.message.data()), taken.message.size());
  CHECK(read_back.ok());
  const ethost::lane::InferRequest& message = read_back.value();
  // The input's bytes stay in its region: the slot holds only the outputs' room.
  CHECK(message.input_count == 1 && message.inputs[0].offset == 0 && message.room_offset == 0);
  CHECK(message.inputs[0].ndim == 2 && message.inputs[0].dims[0] == 2);
  CHECK(message.outputs == 0b11 && message.refs.size() == 2);
  const auto& in = message.refs[0];
  CHECK(in.tensor == 0 && !in.output && in.region == "in" && in.offset == 256 &&
        in.byte_size == 64);
  const auto& out = message.refs[1];
  CHECK(out.tensor == 0 && out.output && out.region == "out" && out.offset == 0 &&
        out.byte_size == 16);

  std::vector<ethost::lane::WireOutput> outputs(2);
  outputs[0].index = 0;
  outputs[0].offset = ethost::lane::kInRegion;
  outputs[1].index = 1;
  outputs[1].offset = message.room_offset;
  for (auto& output : outputs) {
    output.ndim = 1;
    output.dims[0] = 4;
  }
  std::string answer, written;
  ethost::lane::append_answer(answer, taken.id, outputs.data(), outputs.size());
  bool keep_alive = true;
  CHECK(front.lane.answer_lane(taken.id, reinterpret_cast<const uint8_t*>(answer.data()) + 4,
                               answer.size() - 4, "", written, keep_alive));
  CHECK_CONTAINS(written, R"({"name":"output_0","datatype":"FP32","shape":[4],"parameters":)"
                          R"({"shared_memory_region":"out","shared_memory_byte_size":16}})");
  CHECK_CONTAINS(written, R"({"name":"output_1","datatype":"FP32","shape":[4],"data":[0.0,)");
  CHECK(front.lane.pending() == 0 && front.slots->in_use() == 0);
}

TEST(an_output_is_answered_in_a_region_only_where_the_request_put_it) {
  Front front;
  FrontLane::Taken taken;
  CHECK(front.take(R"({"inputs": [{"name": "input_0", "shape": [1, 8], "datatype": "FP32",)"
                   R"( "data": [0,1,2,3,4,5,6,7]}], "outputs": [{"name": "output_1",)"
                   R"( "parameters": {"shared_memory_region": "out", "shared_memory_offset": 8,)"
                   R"( "shared_memory_byte_size": 16}}]})",
                   taken));
  std::string written;
  bool keep_alive = true;
  // Outputs the engine's Python placed: output_1 in the arena although its request named a
  // region, then output_1 in its region (data null).
  Output arena_output{1, {4}, front.arena.data()};
  CHECK(!front.lane.answer(taken.id, "1", {arena_output}, "", written, keep_alive));
  Output region_output{1, {4}, nullptr};
  CHECK(front.lane.answer(taken.id, "1", {region_output}, "", written, keep_alive));
  CHECK_CONTAINS(written, R"("parameters":{"shared_memory_region":"out",)"
                          R"("shared_memory_byte_size":16,"shared_memory_offset":8}})");
}
