// The front's native path over a gRPC ModelInfer message (FrontLane::take_grpc, grpc_infer.h):
// any bytes as the message grpcio hands over. A message it takes has a lane message that reads
// back with its inputs inside the arena (front_fixture.h's check_message); the answer it then
// writes for the engine's outputs (each asked output at its shape's bounds, dynamic dimensions
// 1, or in the client's region the request named for it) is a sequence of well-formed protobuf
// fields, one raw_output_contents entry per output (but none after the last with bytes when a
// tensor lies in a region); and every slot comes back.
#include "front_fixture.h"

#include <cstring>
#include <string>
#include <vector>

using namespace etrt_front;
using fuzz_fixture::check_message;
using fuzz_fixture::require;

namespace {

uint64_t varint(const std::string& bytes, size_t& at) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    require(at < bytes.size(), "a varint ends inside the answer");
    uint8_t byte = static_cast<uint8_t>(bytes[at++]);
    value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if (byte < 0x80) return value;
  }
  require(false, "a varint of at most 10 bytes");
  return 0;
}

// The answer's top-level fields: strings 1-3, outputs 5, raw contents 6, all length-delimited.
size_t raw_entries(const std::string& answer) {
  size_t at = 0, raw = 0;
  while (at < answer.size()) {
    uint64_t tag = varint(answer, at);
    require((tag & 7) == 2 &&
                (tag >> 3 == 1 || tag >> 3 == 2 || tag >> 3 == 3 || tag >> 3 == 5 || tag >> 3 == 6),
            "a ModelInferResponse field");
    uint64_t length = varint(answer, at);
    require(length <= answer.size() - at, "a field inside the answer");
    at += length;
    raw += tag >> 3 == 6;
  }
  return raw;
}

// The lane's answer: each asked output at the start of the room, one after another, or in the
// client's region the request named for it.
bool lane_answer(const FrontLane::Taken& taken, std::vector<uint8_t>& payload, size_t& outputs,
                 bool& any_region) {
  auto read = ethost::lane::read_request(reinterpret_cast<const uint8_t*>(taken.message.data()),
                                         taken.message.size());
  const ethost::lane::InferRequest& lane = read.value();
  const MethodEntry* method = fuzz_fixture::method_of(lane.route);
  any_region = !lane.refs.empty();
  payload.assign(ethost::lane::kAnswerHead, 0);
  payload[0] = ethost::lane::kDoneTag;
  std::memcpy(payload.data() + 8, &lane.request_id, 8);
  uint64_t at = lane.room_offset, end = lane.room_offset + lane.room_size;
  outputs = 0;
  for (uint32_t o = 0; o < method->outputs.size(); ++o) {
    if (!(lane.outputs >> o & 1)) continue;
    bool in_region = false;  // the engine writes it into the region the request named
    for (const ethost::lane::WireShmRef& ref : lane.refs)
      in_region |= ref.output && ref.tensor == o;
    const TensorSpec& spec = method->outputs[o];
    uint64_t nbytes = info_of(spec.datatype).size;
    std::vector<int64_t> dims;
    for (int64_t bound : spec.shape) {
      dims.push_back(spec.dynamic ? 1 : bound);
      nbytes *= static_cast<uint64_t>(dims.back());
    }
    if (!in_region && nbytes > end - at) return false;  // a room the engine would not fill so
    uint32_t ndim = static_cast<uint32_t>(dims.size());
    uint64_t offset = in_region ? ethost::lane::kInRegion : at;
    size_t head = payload.size();
    payload.resize(head + ethost::lane::kOutputHead + 8 * ndim);
    std::memcpy(payload.data() + head, &o, 4);
    std::memcpy(payload.data() + head + 4, &ndim, 4);
    std::memcpy(payload.data() + head + 8, &offset, 8);
    if (ndim > 0) std::memcpy(payload.data() + head + 16, dims.data(), 8 * ndim);
    if (!in_region) at += ethost::limits::align_up(nbytes);
    ++outputs;
  }
  payload[1] = static_cast<uint8_t>(outputs);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  static fuzz_fixture::Front front;
  std::vector<uint8_t> message(bytes, bytes + size);  // its own block: reading past it is a finding
  FrontLane::Taken taken;
  if (front.lane->take_grpc(message.data(), message.size(), taken) == FrontLane::Take::Taken) {
    require(taken.complete && taken.consumed == size, "a message is taken whole");
    check_message(taken);
    std::vector<uint8_t> payload;
    size_t outputs = 0;
    bool answered = false;
    std::string written;
    bool any_region = false;
    if (lane_answer(taken, payload, outputs, any_region)) {
      bool keep_alive;
      answered = front.lane->answer_lane_to(
          taken.id, payload.data(), payload.size(), {},
          [&](const AnswerBytes& answer) {
            written = answer.head;
            for (std::string_view piece : answer.binary) written.append(piece);
          },
          keep_alive);
      require(answered, "an answer inside its room is written");
      // One raw entry per output, but those after the last with bytes when any tensor lies in a
      // region.
      size_t entries = raw_entries(written);
      require(entries == outputs || (any_region && entries < outputs), "one raw entry per output");
    }
    Protocol protocol;
    bool keep_alive;
    require(answered || front.lane->release(taken.id, protocol, keep_alive),
            "an unanswered request waits");
  }
  require(front.lane->pending() == 0 && front.slots->in_use() == 0, "every slot came back");
  return 0;
}
