#include "wire.h"

#include <cstring>

namespace ethost::lane {
namespace {

template <typename T>
T load(const uint8_t* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));  // little-endian hosts only (x86-64, arm64)
  return value;
}

template <typename T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

Status malformed(const std::string& why) {
  return Status(Error::InvalidArgument, "malformed lane request: " + why);
}

}  // namespace

bool read_cancel(const uint8_t* data, size_t size, uint64_t& request_id, bool& deadline) {
  if (size != kCancelSize || data[0] != kCancelTag) return false;
  request_id = load<uint64_t>(data + 8);
  deadline = data[1] == 1;
  return true;
}

Outcome<InferRequest> read_request(const uint8_t* data, size_t size) {
  if (size < kRequestHead || data[0] != kInferTag) {
    return malformed("not a lane request");
  }
  InferRequest request;
  request.input_count = data[1];
  if (request.input_count > kMaxInputs) {
    return malformed(std::to_string(request.input_count) + " inputs");
  }
  size_t ref_count = load<uint16_t>(data + 2);
  if (ref_count > kMaxShmRefs) return malformed(std::to_string(ref_count) + " references");
  request.route = load<uint32_t>(data + 4);
  request.request_id = load<uint64_t>(data + 8);
  request.generation = load<uint64_t>(data + 16);
  request.room_offset = load<uint64_t>(data + 24);
  request.room_size = load<uint64_t>(data + 32);
  request.outputs = load<uint64_t>(data + 40);
  size_t at = kRequestHead;
  for (size_t i = 0; i < request.input_count; ++i) {
    if (size - at < kInputHead) return malformed("cut short");
    WireInput& input = request.inputs[i];
    input.offset = load<uint64_t>(data + at);
    input.ndim = load<uint32_t>(data + at + 8);
    at += kInputHead;
    if (input.ndim > kMaxDims) return malformed(std::to_string(input.ndim) + " dimensions");
    if ((size - at) / 8 < input.ndim) return malformed("cut short");
    for (size_t d = 0; d < input.ndim; ++d, at += 8) {
      input.dims[d] = load<int64_t>(data + at);
    }
  }
  request.refs.resize(ref_count);
  for (WireShmRef& ref : request.refs) {
    if (size - at < kShmRefHead) return malformed("cut short");
    ref.tensor = load<uint32_t>(data + at);
    ref.output = data[at + 4] != 0;
    size_t name_bytes = load<uint16_t>(data + at + 6);
    ref.offset = load<uint64_t>(data + at + 8);
    ref.byte_size = load<uint64_t>(data + at + 16);
    at += kShmRefHead;
    if (size - at < name_bytes) return malformed("cut short");
    ref.region.assign(reinterpret_cast<const char*>(data + at), name_bytes);
    at += name_bytes;
    if (ref.tensor >= (ref.output ? kMaxOutputs : request.input_count)) {
      return malformed("a reference to tensor " + std::to_string(ref.tensor));
    }
  }
  if (at != size) return malformed("longer than its fields");
  return request;
}

std::string write_request(const InferRequest& request) {
  std::string out;
  put<uint8_t>(out, kInferTag);
  put<uint8_t>(out, static_cast<uint8_t>(request.input_count));
  put<uint16_t>(out, static_cast<uint16_t>(request.refs.size()));
  put<uint32_t>(out, request.route);
  put<uint64_t>(out, request.request_id);
  put<uint64_t>(out, request.generation);
  put<uint64_t>(out, request.room_offset);
  put<uint64_t>(out, request.room_size);
  put<uint64_t>(out, request.outputs);
  for (size_t i = 0; i < request.input_count; ++i) {
    const WireInput& input = request.inputs[i];
    put<uint64_t>(out, input.offset);
    put<uint32_t>(out, input.ndim);
    put<uint32_t>(out, 0);
    for (size_t d = 0; d < input.ndim; ++d) put<int64_t>(out, input.dims[d]);
  }
  for (const WireShmRef& ref : request.refs) {
    put<uint32_t>(out, ref.tensor);
    put<uint8_t>(out, ref.output ? 1 : 0);
    put<uint8_t>(out, 0);
    put<uint16_t>(out, static_cast<uint16_t>(ref.region.size()));
    put<uint64_t>(out, ref.offset);
    put<uint64_t>(out, ref.byte_size);
    out += ref.region;
  }
  return out;
}

void append_answer(std::string& out, uint64_t request_id, const WireOutput* outputs, size_t count) {
  size_t length = kAnswerHead;
  for (size_t i = 0; i < count; ++i) length += kOutputHead + 8 * outputs[i].ndim;
  put<uint32_t>(out, static_cast<uint32_t>(length));
  put<uint8_t>(out, kDoneTag);
  put<uint8_t>(out, static_cast<uint8_t>(count));
  put<uint16_t>(out, 0);
  put<uint32_t>(out, 0);
  put<uint64_t>(out, request_id);
  for (size_t i = 0; i < count; ++i) {
    const WireOutput& output = outputs[i];
    put<uint32_t>(out, output.index);
    put<uint32_t>(out, output.ndim);
    put<uint64_t>(out, output.offset);
    for (size_t d = 0; d < output.ndim; ++d) put<int64_t>(out, output.dims[d]);
  }
}

}  // namespace ethost::lane
