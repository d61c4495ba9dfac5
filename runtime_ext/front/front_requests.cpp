#include "front_requests.h"

#include "json_reader.h"

#include <cmath>
#include <limits>

namespace etrt_front {
namespace {

// Keys of one object, to refuse a repeated one (orjson keeps the last; the Python path decides).
class Keys {
 public:
  bool first_time(std::string_view key) {
    for (size_t i = 0; i < count_; ++i) {
      if (seen_[i] == key) return false;
    }
    if (count_ == seen_.size()) return false;
    seen_[count_++] = key;
    return true;
  }

 private:
  std::array<std::string_view, 16> seen_;
  size_t count_ = 0;
};

// Whether a JSON input's element count can be its data's: a list of n values takes at least 2n
// characters. Bounds its byte count by the body's size, so that sums of them cannot wrap.
bool fits_its_data(const GivenInput& input) {
  return input.data_begin == nullptr ||
         input.count <= static_cast<uint64_t>(input.data_end - input.data_begin) / 2;
}

// The text of the list at the reader, skipped past.
bool list_text(JsonReader& reader, const char*& begin, const char*& end) {
  if (reader.peek() != JsonReader::Kind::Array) return false;
  begin = reader.position();
  if (!reader.skip()) return false;
  end = reader.position();
  return true;
}

bool read_shape(JsonReader& reader, GivenInput& input, bool integral_floats) {
  if (!reader.begin_array()) return false;
  bool first = true;
  input.ndim = 0;
  input.count = 1;
  while (reader.next_element(first)) {
    JsonNumber number;
    if (input.ndim == kMaxDims || !reader.number(number)) return false;
    int64_t dim;
    if (number.is_integer) {
      dim = number.integer;
    } else if (integral_floats && std::isfinite(number.value) &&
               number.value == std::trunc(number.value) && std::fabs(number.value) <= kMaxDim) {
      dim = static_cast<int64_t>(number.value);  // the native API reads 3.0 as 3
    } else {
      return false;
    }
    if (dim < 0 || dim > kMaxDim) return false;
    input.dims[input.ndim++] = dim;
    if (dim != 0 &&
        input.count > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(dim)) {
      return false;
    }
    input.count *= static_cast<uint64_t>(dim);
  }
  return !reader.failed();
}

bool read_datatype(JsonReader& reader, GivenInput& input) {
  std::string_view name;
  if (!reader.string(name)) return false;
  input.datatype = find_datatype(name);
  return input.datatype != nullptr;
}

// The fields both protocols' inputs have: "shape", "datatype" and "data" (its text, read once
// the input is bound). Other: any other key, for the caller.
enum class Field { Read, Bad, Other };

struct TensorFields {
  bool shape = false, datatype = false, data = false;
  bool complete() const { return shape && datatype; }
};

Field tensor_field(JsonReader& reader, std::string_view key, GivenInput& input,
                   bool integral_floats, TensorFields& seen) {
  bool ok;
  if (key == "shape") {
    ok = seen.shape = read_shape(reader, input, integral_floats);
  } else if (key == "datatype") {
    ok = seen.datatype = read_datatype(reader, input);
  } else if (key == "data") {
    ok = seen.data = list_text(reader, input.data_begin, input.data_end);
  } else {
    return Field::Other;
  }
  return ok ? Field::Read : Field::Bad;
}

// One input of the native API: {"name"?, "shape", "datatype", "data"}; other keys ignored.
bool native_input(JsonReader& reader, GivenInput& input) {
  if (!reader.begin_object()) return false;
  Keys keys;
  TensorFields seen;
  bool first = true;
  std::string_view key;
  while (reader.next_key(first, key)) {
    if (!keys.first_time(key)) return false;
    Field field = tensor_field(reader, key, input, true, seen);
    if (field == Field::Bad) return false;
    if (field == Field::Read) continue;
    if (key == "name") {
      if (reader.peek() == JsonReader::Kind::Null) {
        if (!reader.null()) return false;
      } else if (!reader.string(input.name)) {
        return false;
      } else {
        input.named = true;
      }
    } else if (!reader.skip()) {
      return false;
    }
  }
  return !reader.failed() && seen.complete() && seen.data && fits_its_data(input);
}

// The shared memory parameters of a tensor's v2 "parameters", as service/shm/refs.py's parse
// reads them: a non-empty region name, non-negative integer byte size and offset. Other: any
// other key, for the caller.
struct RegionFields {
  bool region = false, byte_size = false, offset = false;
  RegionRef ref;

  // The reference they make (none when no key was given); false where parse refuses them: a
  // region and its byte size are both needed.
  bool reference(RegionRef& out) const {
    if (!region && !byte_size && !offset) return true;
    if (!region || !byte_size) return false;
    out = ref;
    return true;
  }
};

Field region_field(JsonReader& reader, std::string_view key, RegionFields& seen) {
  if (key == "shared_memory_region") {
    seen.region = reader.string(seen.ref.region) && seen.ref.region.size() > 0;
    return seen.region ? Field::Read : Field::Bad;
  }
  bool is_size = key == "shared_memory_byte_size";
  if (!is_size && key != "shared_memory_offset") return Field::Other;
  JsonNumber number;
  if (!reader.number(number) || !number.is_integer || number.integer < 0) return Field::Bad;
  (is_size ? seen.byte_size : seen.offset) = true;
  (is_size ? seen.ref.byte_size : seen.ref.offset) = static_cast<uint64_t>(number.integer);
  return Field::Read;
}

// An input's v2 "parameters": binary_data_size and shared memory (any other is the Python
// path's).
bool v2_input_parameters(JsonReader& reader, int64_t& binary_size, RegionRef& shm) {
  if (reader.peek() == JsonReader::Kind::Null) return reader.null();
  if (!reader.begin_object()) return false;
  Keys keys;
  RegionFields region;
  bool first = true;
  std::string_view key;
  while (reader.next_key(first, key)) {
    if (!keys.first_time(key)) return false;
    Field field = region_field(reader, key, region);
    if (field == Field::Bad) return false;
    if (field == Field::Read) continue;
    JsonNumber number;
    if (key != "binary_data_size" || !reader.number(number) || !number.is_integer ||
        number.integer < 0) {
      return false;
    }
    binary_size = number.integer;
  }
  return !reader.failed() && region.reference(shm);
}

bool v2_input(JsonReader& reader, GivenInput& input, int64_t& binary_size) {
  if (!reader.begin_object()) return false;
  Keys keys;
  TensorFields seen;
  bool first = true;
  std::string_view key;
  binary_size = -1;
  while (reader.next_key(first, key)) {
    if (!keys.first_time(key)) return false;
    Field field = tensor_field(reader, key, input, false, seen);
    if (field == Field::Bad) return false;
    if (field == Field::Read) continue;
    if (key == "name") {
      if (!reader.string(input.name) || input.name.empty()) return false;
      input.named = true;
    } else if (key == "parameters") {
      if (!v2_input_parameters(reader, binary_size, input.shm)) return false;
    } else if (!reader.skip()) {
      return false;
    }
  }
  // In a region, or binary or JSON data: one of them only.
  int ways = (input.shm.named() ? 1 : 0) + (seen.data ? 1 : 0) + (binary_size >= 0 ? 1 : 0);
  return !reader.failed() && input.named && seen.complete() && ways == 1 && fits_its_data(input);
}

bool v2_output(JsonReader& reader, GivenOutput& output) {
  if (!reader.begin_object()) return false;
  Keys keys;
  bool first = true, named = false;
  std::string_view key;
  while (reader.next_key(first, key)) {
    if (!keys.first_time(key)) return false;
    if (key == "name") {
      if (!reader.string(output.name)) return false;
      named = true;
    } else if (key == "parameters") {
      if (reader.peek() == JsonReader::Kind::Null) {
        if (!reader.null()) return false;
        continue;
      }
      if (!reader.begin_object()) return false;
      Keys inner;
      RegionFields region;
      bool inner_first = true;
      std::string_view name;
      while (reader.next_key(inner_first, name)) {
        if (!inner.first_time(name)) return false;
        Field field = region_field(reader, name, region);
        if (field == Field::Bad) return false;
        if (field == Field::Read) continue;
        bool flag;
        if (name != "binary_data" || !reader.boolean(flag)) return false;
        output.binary = flag ? 1 : 0;
      }
      if (reader.failed() || !region.reference(output.shm)) return false;
    } else if (!reader.skip()) {
      return false;
    }
  }
  return !reader.failed() && named;
}

bool empty_object_or_null(JsonReader& reader) {
  if (reader.peek() == JsonReader::Kind::Null) return reader.null();
  if (!reader.begin_object()) return false;
  bool first = true;
  std::string_view key;
  return !reader.next_key(first, key) && !reader.failed();
}

uint64_t digits_value(std::string_view text, bool& ok) {
  ok = !text.empty() && text.size() <= 18;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') ok = false;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  return value;
}

}  // namespace

bool read_native(const char* body, size_t size, GivenRequest& request) {
  request.protocol = Protocol::Native;
  JsonReader reader(body, body + size);
  if (!reader.begin_object()) return false;
  Keys keys;
  bool first = true, has_model = false, has_inputs = false;
  std::string_view key;
  while (reader.next_key(first, key)) {
    if (!keys.first_time(key)) return false;
    if (key == "model") {
      has_model = reader.string(request.model);
      if (!has_model) return false;
    } else if (key == "method") {
      if (!reader.string(request.method)) return false;
    } else if (key == "inputs") {
      if (!reader.begin_array()) return false;
      bool first_input = true;
      while (reader.next_element(first_input)) {
        if (request.inputs.size() == kMaxInputs) return false;
        request.inputs.emplace_back();
        if (!native_input(reader, request.inputs.back())) return false;
      }
      has_inputs = !reader.failed();
      if (!has_inputs) return false;
    } else if (!reader.skip()) {
      return false;
    }
  }
  return !reader.failed() && reader.at_end() && has_model && has_inputs;
}

bool read_v2(const char* body, size_t size, const std::string_view* binary_header,
             uint64_t max_json, GivenRequest& request) {
  request.protocol = Protocol::V2;
  size_t json_size = size;
  if (binary_header != nullptr) {
    bool ok;
    uint64_t length = digits_value(*binary_header, ok);
    if (!ok || length > size) return false;
    json_size = static_cast<size_t>(length);
  }
  if (json_size > max_json || json_size > request.available) return false;
  JsonReader reader(body, body + json_size);
  if (!reader.begin_object()) return false;
  Keys keys;
  bool first = true, has_inputs = false;
  std::string_view key;
  std::array<int64_t, kMaxInputs> binary_sizes{};
  while (reader.next_key(first, key)) {
    if (!keys.first_time(key)) return false;
    if (key == "id") {
      if (reader.peek() == JsonReader::Kind::Null) {
        if (!reader.null()) return false;
      } else {
        if (!reader.string(request.id)) return false;
        request.has_id = true;
      }
    } else if (key == "parameters") {
      if (!empty_object_or_null(reader)) return false;  // parameters are the Python path's
    } else if (key == "inputs") {
      if (!reader.begin_array()) return false;
      bool first_input = true;
      while (reader.next_element(first_input)) {
        if (request.inputs.size() == kMaxInputs) return false;
        request.inputs.emplace_back();
        if (!v2_input(reader, request.inputs.back(), binary_sizes[request.inputs.size() - 1])) {
          return false;
        }
      }
      has_inputs = !reader.failed() && !request.inputs.empty();
      if (!has_inputs) return false;
    } else if (key == "outputs") {
      if (reader.peek() == JsonReader::Kind::Null) {
        if (!reader.null()) return false;
        continue;
      }
      if (!reader.begin_array()) return false;
      request.all_outputs = false;
      bool first_output = true;
      while (reader.next_element(first_output)) {
        if (request.outputs.size() == kMaxOutputs) return false;
        request.outputs.emplace_back();
        if (!v2_output(reader, request.outputs.back())) return false;
      }
      if (reader.failed()) return false;
    } else if (!reader.skip()) {
      return false;
    }
  }
  if (reader.failed() || !reader.at_end() || !has_inputs) return false;
  // Binary inputs take the payload in the header's order, every byte of it. An input in a region
  // takes exactly its tensor's bytes there: any other byte size the engine's Python words
  // (service/front/engine_requests.py's _lane_refs sends it so).
  const uint8_t* payload = reinterpret_cast<const uint8_t*>(body) + json_size;
  request.payload = payload;
  bool whole = request.available >= size;
  uint64_t left = size - json_size, at = 0;
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    GivenInput& input = request.inputs[i];
    uint64_t size_of = input.datatype->size;
    if (input.shm.named()) {
      // Divided, not multiplied: count x size may not fit in 64 bits ([2^30, 2^30, 4] FP32).
      uint64_t nbytes = input.shm.byte_size;
      if (nbytes % size_of != 0 || nbytes / size_of != input.count) return false;
      continue;
    }
    if (binary_sizes[i] < 0) continue;
    if (binary_header == nullptr) return false;
    uint64_t nbytes = static_cast<uint64_t>(binary_sizes[i]);
    if (nbytes > left - at || nbytes % size_of != 0 || nbytes / size_of != input.count) {
      return false;
    }
    input.bytes = payload + at;
    if (input.datatype->type == Datatype::Bool) {
      if (!whole) return false;  // its bytes are checked, and they have not all arrived
      for (uint64_t b = 0; b < nbytes; ++b) {
        if (input.bytes[b] > 1) return false;
      }
    }
    at += nbytes;
  }
  return at == left;
}

bool bind(const GivenRequest& request, const MethodEntry& method,
          std::array<const GivenInput*, kMaxInputs>& ordered) {
  const auto& specs = method.inputs;
  if (request.inputs.size() != specs.size() || specs.size() > kMaxInputs) return false;
  bool any_named = false, all_named = true;
  for (const auto& input : request.inputs) {
    any_named = any_named || input.named;
    all_named = all_named && input.named;
  }
  if (any_named && !all_named) return false;
  ordered.fill(nullptr);
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const GivenInput& input = request.inputs[i];
    size_t at = i;
    if (any_named) {
      at = specs.size();
      for (size_t s = 0; s < specs.size(); ++s) {
        if (specs[s].name == input.name) at = s;
      }
      if (at == specs.size() || ordered[at] != nullptr) return false;  // unknown, twice
    }
    const TensorSpec& spec = specs[at];
    if (!spec.tensor || !spec.known || spec.datatype != input.datatype->type ||
        spec.shape.size() != input.ndim) {
      return false;
    }
    for (size_t d = 0; d < input.ndim; ++d) {
      if (spec.dynamic ? input.dims[d] > spec.shape[d] : input.dims[d] != spec.shape[d]) {
        return false;
      }
    }
    ordered[at] = &input;
  }
  return true;
}

bool output_mask(const GivenRequest& request, const MethodEntry& method, uint64_t& mask) {
  size_t count = method.outputs.size();
  if (count > kMaxOutputs) return false;
  if (request.all_outputs) {
    mask = count == kMaxOutputs ? ~uint64_t{0} : (uint64_t{1} << count) - 1;
    return count > 0;
  }
  mask = 0;
  size_t last = 0;
  for (size_t i = 0; i < request.outputs.size(); ++i) {
    size_t index = count;
    for (size_t o = 0; o < count; ++o) {
      if (method.outputs[o].name == request.outputs[i].name) index = o;
    }
    if (index == count || (i > 0 && index <= last)) return false;
    mask |= uint64_t{1} << index;
    last = index;
  }
  return mask != 0;
}

}  // namespace etrt_front
