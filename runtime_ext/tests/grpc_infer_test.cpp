// gRPC ModelInfer on the fronts' native path in plain C++ (grpc_infer.h): what a message gives,
// what is left to the servicer, and the response's bytes field by field.
// (tests/unit/test_front_grpc_differential.py holds both to the servicer's.)
#include "check.h"
#include "grpc_infer.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

using namespace etrt_front;

namespace {

std::string varint(uint64_t value) {
  std::string out;
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
  return out;
}

std::string field(uint32_t number, const std::string& payload) {
  return varint(uint64_t{number} << 3 | 2) + varint(payload.size()) + payload;
}

// An FP32 input "x" of `dims`, its raw contents `raw` bytes of zeros.
std::string message(const std::string& dims, size_t raw, const std::string& extra = {}) {
  std::string input = field(1, "x") + field(2, "FP32") + dims;
  return field(1, "m") + field(3, "q7") + field(5, input) + extra +
         field(7, std::string(raw, '\0'));
}

bool read(const std::string& bytes, GivenRequest& request) {
  return read_grpc_infer(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), request);
}

}  // namespace

TEST(a_message_gives_its_model_id_inputs_and_raw_contents) {
  std::string bytes = message(field(3, varint(2) + varint(3)), 24, field(6, field(1, "y")));
  GivenRequest request;
  CHECK(read(bytes, request));
  CHECK(request.protocol == Protocol::Grpc && request.model == "m" && request.version.empty());
  CHECK(request.has_id && request.id == "q7");
  CHECK(request.inputs.size() == 1 && request.inputs[0].named && request.inputs[0].name == "x");
  CHECK(request.inputs[0].ndim == 2 && request.inputs[0].count == 6);
  CHECK(request.inputs[0].bytes == reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size() -
                                       24);  // points into the message
  CHECK(!request.all_outputs && request.outputs.size() == 1 && request.outputs[0].name == "y");
}

TEST(a_shape_one_dimension_per_field_is_read_as_a_packed_one) {
  GivenRequest request;
  CHECK(read(message(varint(3 << 3) + varint(2) + varint(3 << 3) + varint(3), 24), request));
  CHECK(request.inputs[0].ndim == 2 && request.inputs[0].dims[1] == 3);
}

TEST(what_the_servicer_reads_otherwise_is_left_to_it) {
  std::string dims = field(3, varint(2) + varint(3));
  GivenRequest request;
  CHECK(!read(message(dims, 20), request));  // a byte count that is not the shape's
  CHECK(!read(message(dims, 24, field(4, field(1, "timeout"))), request));  // parameters
  CHECK(!read(message(dims, 24, varint(15 << 3) + varint(1)), request));    // an unknown field
  CHECK(!read(message(dims, 24, field(1, "m")), request));                  // a model named twice
  CHECK(!read(field(1, "m") + field(3, "\xc3\xa9") + field(5, field(1, "x") + field(2, "FP32")) +
                  field(7, std::string(4, '\0')),
              request));  // an id that is not printable ASCII
  CHECK(!read(message(field(3, varint(uint64_t{1} << 63)), 0), request));  // negative dimension
  std::string typed = field(1, "x") + field(2, "FP32") + field(5, std::string());
  CHECK(!read(field(1, "m") + field(5, typed), request));  // typed contents
  std::string bools = field(1, "x") + field(2, "BOOL") + field(3, varint(2));
  CHECK(!read(field(1, "m") + field(5, bools) + field(7, std::string("\x01\x02", 2)), request));
  CHECK(!read(std::string("\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11), request));
}

TEST(the_answer_is_the_servicers_message_with_its_tensors_where_they_lie) {
  AnswerPlan plan;
  plan.protocol = Protocol::Grpc;
  plan.model = "m";
  plan.version = "1";
  plan.has_id = true;
  plan.id = "q7";
  plan.regions.assign(2, {});  // one per method output (none in a region)
  TensorSpec y;
  y.name = "y";
  y.datatype = Datatype::I16;
  TensorSpec s;
  s.name = "s";
  s.datatype = Datatype::F32;
  std::vector<uint8_t> data = {1, 0, 2, 0, 3, 0};
  std::vector<Output> outputs(2);
  outputs[0].index = 0;
  outputs[0].shape = {1, 3};
  outputs[0].data = data.data();
  outputs[1].index = 1;  // a 0-dim output: no shape field, 4 bytes
  outputs[1].data = data.data();
  AnswerBytes answer;
  write_grpc_answer(plan, {y, s}, outputs, answer);
  std::string expected = field(1, "m") + field(2, "1") + field(3, "q7") +
                         field(5, field(1, "y") + field(2, "INT16") + field(3, "\x01\x03")) +
                         field(5, field(1, "s") + field(2, "FP32"));
  CHECK(answer.head == expected);
  CHECK(answer.binary.size() == 4);
  CHECK(answer.binary[0] == "\x32\x06" && answer.binary[2] == "\x32\x04");
  CHECK(answer.binary[1].data() == reinterpret_cast<const char*>(data.data()) &&
        answer.binary[1].size() == 6 && answer.binary[3].size() == 4);
  CHECK(answer.size() == expected.size() + 2 + 6 + 2 + 4);
}

namespace {

std::string parameter(const std::string& key, const std::string& choice) {
  return field(1, key) + field(2, choice);
}

std::string integer(uint64_t value) {  // InferParameter.int64_param
  return varint(2 << 3) + varint(value);
}

}  // namespace

TEST(an_input_in_a_region_takes_no_raw_contents_and_needs_its_tensors_byte_size) {
  std::string region = field(4, parameter("shared_memory_region", field(3, "r1"))) +
                       field(4, parameter("shared_memory_byte_size", integer(24))) +
                       field(4, parameter("shared_memory_offset", integer(256)));
  std::string input = field(1, "x") + field(2, "FP32") + field(3, varint(2) + varint(3)) + region;
  std::string bytes = field(1, "m") + field(5, input);  // what the request's views point into
  GivenRequest request;
  CHECK(read(bytes, request));
  CHECK(request.inputs[0].shm.named() && request.inputs[0].shm.region == "r1");
  CHECK(request.inputs[0].shm.byte_size == 24 && request.inputs[0].shm.offset == 256);
  CHECK(request.inputs[0].bytes == nullptr);
  GivenRequest other;
  std::string wrong = input;
  wrong.replace(wrong.find(integer(24)), integer(24).size(), integer(20));
  CHECK(!read(field(1, "m") + field(5, wrong), other));  // not the tensor's byte size
  GivenRequest extra;
  CHECK(!read(field(1, "m") + field(5, input) + field(7, std::string(24, '\0')), extra));
  // An input's binary_data_size (KServe's gRPC client sends it) is ignored, as the servicer
  // ignores it; one of another type, or any other parameter, is the servicer's.
  std::string head = field(1, "x") + field(2, "FP32") + field(3, varint(2) + varint(3));
  std::string raw = field(7, std::string(24, '\0'));
  GivenRequest sized;
  CHECK(read(
      field(1, "m") + field(5, head + field(4, parameter("binary_data_size", integer(24)))) + raw,
      sized));
  CHECK(sized.inputs[0].bytes != nullptr && !sized.inputs[0].shm.named());
  for (const std::string& odd :
       {parameter("binary_data_size", field(3, "24")), parameter("classification", integer(3))}) {
    GivenRequest unknown;
    CHECK(!read(field(1, "m") + field(5, head + field(4, odd)) + raw, unknown));
  }
}

TEST(an_output_in_a_region_is_answered_with_its_parameters_and_no_bytes) {
  AnswerPlan plan;
  plan.protocol = Protocol::Grpc;
  plan.model = "m";
  plan.version = "1";
  plan.regions = {AnsweredRegion{"r2", 256}};
  plan.any_region = true;
  TensorSpec y;
  y.name = "y";
  y.datatype = Datatype::F32;
  std::vector<Output> outputs(1);
  outputs[0].shape = {2};
  AnswerBytes answer;
  write_grpc_answer(plan, {y}, outputs, answer);
  std::string tensor = field(1, "y") + field(2, "FP32") + field(3, varint(2)) +
                       field(4, parameter("shared_memory_region", field(3, "r2"))) +
                       field(4, parameter("shared_memory_byte_size", integer(8))) +
                       field(4, parameter("shared_memory_offset", integer(256)));
  CHECK(answer.head == field(1, "m") + field(2, "1") + field(5, tensor));
  CHECK(answer.binary.empty());  // no empty raw entry after the last output with bytes
}
