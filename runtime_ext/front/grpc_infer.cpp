#include "grpc_infer.h"

#include <array>
#include <limits>
#include <string_view>

namespace etrt_front {
namespace {

// grpc_service.proto's field numbers.
namespace request_field {
constexpr uint32_t kModelName = 1, kModelVersion = 2, kId = 3, kInputs = 5, kOutputs = 6,
                   kRawInputContents = 7;
}
namespace input_field {
constexpr uint32_t kName = 1, kDatatype = 2, kShape = 3;
}
namespace output_field {
constexpr uint32_t kName = 1;
}
namespace response_field {
constexpr uint32_t kModelName = 1, kModelVersion = 2, kId = 3, kOutputs = 5, kRawOutputContents = 6;
}
namespace tensor_field {
constexpr uint32_t kName = 1, kDatatype = 2, kShape = 3;
}

constexpr uint32_t kVarint = 0, kLengthDelimited = 2;
constexpr size_t kMaxVarintBytes = 10;

// The protobuf wire format, read forward; every read fails rather than pass the end.
class WireReader {
 public:
  WireReader(const uint8_t* data, size_t size) : at_(data), end_(data + size) {}
  WireReader(std::string_view bytes)
      : WireReader(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()) {}

  bool done() const { return at_ == end_; }

  bool varint(uint64_t& value) {
    value = 0;
    for (size_t i = 0; i < kMaxVarintBytes; ++i) {
      if (at_ == end_) return false;
      uint8_t byte = *at_++;
      // The tenth byte carries bit 63 only: anything more is not a 64-bit value.
      if (i == kMaxVarintBytes - 1 && byte > 1) return false;
      value |= static_cast<uint64_t>(byte & 0x7F) << (7 * i);
      if (byte < 0x80) return true;
    }
    return false;
  }

  bool tag(uint32_t& number, uint32_t& type) {
    uint64_t value;
    if (!varint(value) || value >> 3 == 0 || value >> 3 > 0x1FFFFFFF) return false;
    number = static_cast<uint32_t>(value >> 3);
    type = static_cast<uint32_t>(value & 7);
    return true;
  }

  bool bytes(std::string_view& out) {
    uint64_t length;
    if (!varint(length) || length > static_cast<uint64_t>(end_ - at_)) return false;
    out = std::string_view(reinterpret_cast<const char*>(at_), static_cast<size_t>(length));
    at_ += length;
    return true;
  }

 private:
  const uint8_t* at_;
  const uint8_t* end_;
};

// Text the Python path reads as the same string and echoes as the same bytes.
bool printable(std::string_view text) {
  for (char c : text) {
    if (c < 0x20 || c > 0x7E) return false;
  }
  return true;
}

// A singular string field, given once.
bool read_text(WireReader& reader, uint32_t type, bool& seen, std::string_view& out) {
  if (type != kLengthDelimited || seen || !reader.bytes(out) || !printable(out)) return false;
  seen = true;
  return true;
}

bool add_dim(GivenInput& input, uint64_t value) {
  if (input.ndim == kMaxDims || value > static_cast<uint64_t>(kMaxDim)) return false;
  input.dims[input.ndim++] = static_cast<int64_t>(value);
  if (value != 0 && input.count > std::numeric_limits<uint64_t>::max() / value) return false;
  input.count *= value;
  return true;
}

// A shape's entries: packed (proto3's way) or one per field (which parsers must also accept).
bool read_shape(WireReader& reader, uint32_t type, GivenInput& input) {
  uint64_t value;
  if (type == kVarint) return reader.varint(value) && add_dim(input, value);
  std::string_view packed;
  if (type != kLengthDelimited || !reader.bytes(packed)) return false;
  WireReader dims(packed);
  while (!dims.done()) {
    if (!dims.varint(value) || !add_dim(input, value)) return false;
  }
  return true;
}

bool read_input(std::string_view message, GivenInput& input) {
  WireReader reader(message);
  input.named = true;  // gRPC inputs are always bound by name ("" names none)
  bool has_name = false, has_datatype = false;
  std::string_view datatype;
  while (!reader.done()) {
    uint32_t number, type;
    if (!reader.tag(number, type)) return false;
    if (number == input_field::kName) {
      if (!read_text(reader, type, has_name, input.name)) return false;
    } else if (number == input_field::kDatatype) {
      if (!read_text(reader, type, has_datatype, datatype)) return false;
    } else if (number == input_field::kShape) {
      if (!read_shape(reader, type, input)) return false;
    } else {
      return false;  // parameters, typed contents, anything unknown: the Python path's
    }
  }
  input.datatype = find_datatype(datatype);
  return input.datatype != nullptr;
}

bool read_output(std::string_view message, GivenOutput& output) {
  WireReader reader(message);
  bool has_name = false;
  while (!reader.done()) {
    uint32_t number, type;
    if (!reader.tag(number, type) || number != output_field::kName ||
        !read_text(reader, type, has_name, output.name)) {
      return false;  // parameters (shared memory, classification): the Python path's
    }
  }
  return true;
}

// Raw contents, one entry per input, each its tensor's bytes exactly (BOOL bytes 0 or 1: the
// Python path rewrites others).
bool bind_contents(GivenRequest& request, const std::array<std::string_view, kMaxInputs>& raw,
                   size_t raw_count) {
  if (request.inputs.empty() || raw_count != request.inputs.size()) return false;
  for (size_t i = 0; i < raw_count; ++i) {
    GivenInput& input = request.inputs[i];
    uint64_t size_of = input.datatype->size;
    // Divided, not multiplied: count x size may not fit in 64 bits.
    if (raw[i].size() % size_of != 0 || raw[i].size() / size_of != input.count) return false;
    input.bytes = reinterpret_cast<const uint8_t*>(raw[i].data());
    if (input.datatype->type == Datatype::Bool) {
      for (size_t b = 0; b < raw[i].size(); ++b) {
        if (input.bytes[b] > 1) return false;
      }
    }
  }
  return true;
}

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_tag(std::string& out, uint32_t number, uint32_t type) {
  put_varint(out, uint64_t{number} << 3 | type);
}

// A length-delimited field; proto3 leaves an empty string out.
void put_text(std::string& out, uint32_t number, std::string_view text) {
  if (text.empty()) return;
  put_tag(out, number, kLengthDelimited);
  put_varint(out, text.size());
  out.append(text);
}

size_t varint_size(uint64_t value) {
  size_t size = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++size;
  }
  return size;
}

}  // namespace

bool read_grpc_infer(const uint8_t* message, size_t size, GivenRequest& request) {
  request.protocol = Protocol::Grpc;
  WireReader reader(message, size);
  bool has_model = false, has_version = false, has_id = false;
  std::array<std::string_view, kMaxInputs> raw;
  size_t raw_count = 0;
  while (!reader.done()) {
    uint32_t number, type;
    if (!reader.tag(number, type)) return false;
    std::string_view field;
    switch (number) {
      case request_field::kModelName:
        if (!read_text(reader, type, has_model, request.model)) return false;
        break;
      case request_field::kModelVersion:
        if (!read_text(reader, type, has_version, request.version)) return false;
        break;
      case request_field::kId:
        if (!read_text(reader, type, has_id, request.id)) return false;
        request.has_id = !request.id.empty();  // "" is no id: the answer has none either
        break;
      case request_field::kInputs:
        if (type != kLengthDelimited || request.inputs.size() == kMaxInputs ||
            !reader.bytes(field)) {
          return false;
        }
        request.inputs.emplace_back();
        if (!read_input(field, request.inputs.back())) return false;
        break;
      case request_field::kOutputs:
        if (type != kLengthDelimited || request.outputs.size() == kMaxOutputs ||
            !reader.bytes(field)) {
          return false;
        }
        request.all_outputs = false;
        request.outputs.emplace_back();
        if (!read_output(field, request.outputs.back())) return false;
        break;
      case request_field::kRawInputContents:
        if (type != kLengthDelimited || raw_count == kMaxInputs || !reader.bytes(raw[raw_count])) {
          return false;
        }
        ++raw_count;
        break;
      default: return false;  // request parameters, anything unknown: the Python path's
    }
  }
  return has_model && bind_contents(request, raw, raw_count);
}

void write_grpc_answer(const AnswerPlan& plan, const std::vector<TensorSpec>& specs,
                       const std::vector<Output>& outputs, AnswerBytes& answer) {
  std::string& out = answer.head;
  out.clear();
  answer.binary.clear();
  put_text(out, response_field::kModelName, plan.model);
  put_text(out, response_field::kModelVersion, plan.version);
  if (plan.has_id) put_text(out, response_field::kId, plan.id);
  std::string tensor, shape;
  std::vector<uint64_t> sizes;
  sizes.reserve(outputs.size());
  for (const Output& output : outputs) {
    const TensorSpec& spec = specs[output.index];
    const DatatypeInfo& info = info_of(spec.datatype);
    tensor.clear();
    shape.clear();
    put_text(tensor, tensor_field::kName, spec.name);
    put_text(tensor, tensor_field::kDatatype, info.name);
    uint64_t nbytes = info.size;
    for (int64_t d : output.shape) {
      put_varint(shape, static_cast<uint64_t>(d));
      nbytes *= static_cast<uint64_t>(d);
    }
    put_text(tensor, tensor_field::kShape, shape);  // packed; a 0-dim shape is left out
    put_tag(out, response_field::kOutputs, kLengthDelimited);
    put_varint(out, tensor.size());
    out.append(tensor);
    sizes.push_back(nbytes);
  }
  // Each output's field head, then its bytes where they lie. The heads are written first, with
  // room reserved for all of them, so the views into `framing` stay where they point.
  std::string& framing = answer.framing;
  framing.clear();
  framing.reserve(outputs.size() * (1 + kMaxVarintBytes));
  std::vector<size_t> starts;
  for (uint64_t nbytes : sizes) {
    starts.push_back(framing.size());
    put_tag(framing, response_field::kRawOutputContents, kLengthDelimited);
    put_varint(framing, nbytes);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    size_t head_size = 1 + varint_size(sizes[i]);
    answer.binary.emplace_back(framing.data() + starts[i], head_size);
    answer.binary.emplace_back(reinterpret_cast<const char*>(outputs[i].data), sizes[i]);
  }
}

}  // namespace etrt_front
