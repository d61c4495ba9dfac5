#include "grpc_infer.h"

#include "protobuf_wire.h"

#include <array>
#include <limits>
#include <string_view>

namespace etrt_front {
namespace {

using namespace protobuf_wire;

// grpc_service.proto's field numbers.
namespace request_field {
constexpr uint32_t kModelName = 1, kModelVersion = 2, kId = 3, kInputs = 5, kOutputs = 6,
                   kRawInputContents = 7;
}
namespace input_field {
constexpr uint32_t kName = 1, kDatatype = 2, kShape = 3, kParameters = 4;
}
namespace output_field {
constexpr uint32_t kName = 1, kParameters = 2;
}
// A map<string, InferParameter> entry, and InferParameter's choices read here.
namespace entry_field {
constexpr uint32_t kKey = 1, kValue = 2;
}
namespace parameter_field {
constexpr uint32_t kInt64 = 2, kString = 3, kUint64 = 5;
}
namespace tensor_parameter_field {
constexpr uint32_t kParameters = 4;
}
namespace parameter_write_field {
constexpr uint32_t kInt64 = 2, kString = 3;
}
// Triton's shared memory parameters (service/shm/refs.py), the only ones read here.
constexpr std::string_view kRegion = "shared_memory_region";
constexpr std::string_view kByteSize = "shared_memory_byte_size";
constexpr std::string_view kOffset = "shared_memory_offset";
// An input's byte count, as HTTP clients send it; KServe's gRPC client sends it too. The servicer
// ignores it (the raw contents' length is the byte count), and so does this reader.
constexpr std::string_view kBinaryDataSize = "binary_data_size";
namespace response_field {
constexpr uint32_t kModelName = 1, kModelVersion = 2, kId = 3, kOutputs = 5, kRawOutputContents = 6;
}
namespace tensor_field {
constexpr uint32_t kName = 1, kDatatype = 2, kShape = 3;
}

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

// A tensor's shared memory parameters as they arrive, one map entry at a time.
struct RegionParameters {
  bool has_region = false, has_size = false, has_offset = false;
  bool has_binary_data_size = false;  // an input's, read and ignored
  RegionRef ref;
};

// One entry of a tensor's parameters: a shared memory key with a value of the type the servicer
// reads (refs.parse: a non-empty string region, non-negative integers), or an input's
// binary_data_size (a non-negative integer, ignored), each key once; any other key, type or value
// is the servicer's to judge.
bool read_parameter(std::string_view entry, RegionParameters& found, bool input) {
  WireReader reader(entry);
  std::string_view key, value;
  bool has_key = false, has_value = false;
  while (!reader.done()) {
    uint32_t number, type;
    if (!reader.tag(number, type) || type != kLengthDelimited) return false;
    if (number == entry_field::kKey) {
      if (has_key || !reader.bytes(key)) return false;
      has_key = true;
    } else if (number == entry_field::kValue) {
      if (has_value || !reader.bytes(value)) return false;
      has_value = true;
    } else {
      return false;
    }
  }
  WireReader parameter(value);
  uint32_t number = 0, type = 0;
  if (!has_value || !parameter.tag(number, type)) return false;  // no choice: None
  std::string_view text;
  uint64_t integer = 0;
  bool is_text = false;
  if (number == parameter_field::kString && type == kLengthDelimited) {
    if (!parameter.bytes(text) || !printable(text)) return false;
    is_text = true;
  } else if ((number == parameter_field::kInt64 || number == parameter_field::kUint64) &&
             type == kVarint) {
    if (!parameter.varint(integer)) return false;
    // An int64 past 2^63 is negative; a uint64 that large is refused as well (simpler, rare).
    if (integer > static_cast<uint64_t>(INT64_MAX)) return false;
  } else {
    return false;  // bool, double, or anything else: the servicer words the refusal
  }
  if (!parameter.done()) return false;  // a second choice: the last would win there
  if (key == kRegion) {
    if (!is_text || text.empty() || found.has_region) return false;
    found.has_region = true;
    found.ref.region = text;
  } else if (key == kByteSize) {
    if (is_text || found.has_size) return false;
    found.has_size = true;
    found.ref.byte_size = integer;
  } else if (key == kOffset) {
    if (is_text || found.has_offset) return false;
    found.has_offset = true;
    found.ref.offset = integer;
  } else if (key == kBinaryDataSize && input) {
    if (is_text || found.has_binary_data_size) return false;
    found.has_binary_data_size = true;
  } else {
    return false;  // another parameter (classification, binary data): the servicer's
  }
  return true;
}

// The tensor's region, if its parameters named one (a region and a byte size, at least).
bool region_of(const RegionParameters& found, RegionRef& ref) {
  if (!found.has_region && !found.has_size && !found.has_offset) return true;  // none
  if (!found.has_region || !found.has_size) return false;
  ref = found.ref;
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
  std::string_view datatype, entry;
  RegionParameters parameters;
  while (!reader.done()) {
    uint32_t number, type;
    if (!reader.tag(number, type)) return false;
    if (number == input_field::kName) {
      if (!read_text(reader, type, has_name, input.name)) return false;
    } else if (number == input_field::kDatatype) {
      if (!read_text(reader, type, has_datatype, datatype)) return false;
    } else if (number == input_field::kShape) {
      if (!read_shape(reader, type, input)) return false;
    } else if (number == input_field::kParameters && type == kLengthDelimited) {
      if (!reader.bytes(entry) || !read_parameter(entry, parameters, true)) return false;
    } else {
      return false;  // typed contents, anything unknown: the Python path's
    }
  }
  input.datatype = find_datatype(datatype);
  return input.datatype != nullptr && region_of(parameters, input.shm);
}

bool read_output(std::string_view message, GivenOutput& output) {
  WireReader reader(message);
  bool has_name = false;
  std::string_view entry;
  RegionParameters parameters;
  while (!reader.done()) {
    uint32_t number, type;
    if (!reader.tag(number, type)) return false;
    if (number == output_field::kName) {
      if (!read_text(reader, type, has_name, output.name)) return false;
    } else if (number == output_field::kParameters && type == kLengthDelimited) {
      if (!reader.bytes(entry) || !read_parameter(entry, parameters, false)) return false;
    } else {
      return false;
    }
  }
  return region_of(parameters, output.shm);
}

// Whether `nbytes` are exactly the input's bytes. Divided, not multiplied: count x size may not
// fit in 64 bits.
bool its_bytes(const GivenInput& input, uint64_t nbytes) {
  uint64_t size_of = input.datatype->size;
  return nbytes % size_of == 0 && nbytes / size_of == input.count;
}

// Raw contents, one entry per input that is not in a region, in order, each its tensor's bytes
// exactly (BOOL bytes 0 or 1: the Python path rewrites others). An input in a region takes
// exactly its tensor's bytes there (any other size is the engine's Python's to word).
bool bind_contents(GivenRequest& request, const std::array<std::string_view, kMaxInputs>& raw,
                   size_t raw_count) {
  if (request.inputs.empty()) return false;
  size_t next = 0;
  for (GivenInput& input : request.inputs) {
    if (input.shm.named()) {
      if (!its_bytes(input, input.shm.byte_size)) return false;
      continue;
    }
    if (next == raw_count) return false;  // typed contents, or none: the servicer's
    std::string_view contents = raw[next++];
    if (!its_bytes(input, contents.size())) return false;
    input.bytes = reinterpret_cast<const uint8_t*>(contents.data());
    if (input.datatype->type == Datatype::Bool) {
      for (size_t b = 0; b < contents.size(); ++b) {
        if (input.bytes[b] > 1) return false;
      }
    }
  }
  return next == raw_count;  // an entry too many: the servicer words it
}

void put_parameter(std::string& tensor, std::string_view key, std::string_view text,
                   uint64_t integer, bool is_text) {
  std::string value, entry;
  if (is_text) {
    put_text(value, parameter_write_field::kString, text);
  } else {
    put_tag(value, parameter_write_field::kInt64, kVarint);
    put_varint(value, integer);
  }
  put_text(entry, entry_field::kKey, key);
  put_tag(entry, entry_field::kValue, kLengthDelimited);
  put_varint(entry, value.size());
  entry.append(value);
  put_tag(tensor, tensor_parameter_field::kParameters, kLengthDelimited);
  put_varint(tensor, entry.size());
  tensor.append(entry);
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
  std::vector<uint64_t> sizes;  // each output's raw contents (0 for one in a region)
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
    const AnsweredRegion& region = plan.regions[output.index];
    if (region.in_region()) {  // where it was written (refs.answer_parameters), no bytes here
      put_parameter(tensor, kRegion, region.region, 0, true);
      put_parameter(tensor, kByteSize, {}, nbytes, false);
      if (region.offset != 0) put_parameter(tensor, kOffset, {}, region.offset, false);
      nbytes = 0;
    }
    put_tag(out, response_field::kOutputs, kLengthDelimited);
    put_varint(out, tensor.size());
    out.append(tensor);
    sizes.push_back(nbytes);
  }
  // With a tensor in a region, no empty entries after the last output with bytes (the servicer
  // leaves them out).
  size_t entries = sizes.size();
  while (plan.any_region && entries > 0 && sizes[entries - 1] == 0) --entries;
  // Each output's field head, then its bytes where they lie. The heads are written first, with
  // room reserved for all of them, so the views into `framing` stay where they point.
  std::string& framing = answer.framing;
  framing.clear();
  framing.reserve(entries * (1 + kMaxVarintBytes));
  std::vector<size_t> starts;
  for (size_t i = 0; i < entries; ++i) {
    starts.push_back(framing.size());
    put_tag(framing, response_field::kRawOutputContents, kLengthDelimited);
    put_varint(framing, sizes[i]);
  }
  for (size_t i = 0; i < entries; ++i) {
    size_t head_size = 1 + varint_size(sizes[i]);
    answer.binary.emplace_back(framing.data() + starts[i], head_size);
    const char* data = reinterpret_cast<const char*>(outputs[i].data);
    answer.binary.emplace_back(data, sizes[i]);  // null and 0 bytes for one in a region
  }
}

}  // namespace etrt_front
