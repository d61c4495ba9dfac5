#include "front_answers.h"

#include "json_numbers.h"

#include <cmath>
#include <cstring>

namespace etrt_front {
namespace {

template <typename T>
T load(const uint8_t* data, uint64_t index) {
  T value;
  std::memcpy(&value, data + index * sizeof(T), sizeof(T));
  return value;
}

float half_to_float(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000) << 16;
  uint32_t exponent = (bits >> 10) & 0x1F;
  uint32_t mantissa = bits & 0x3FF;
  uint32_t out;
  if (exponent == 0) {
    if (mantissa == 0) {
      out = sign;
    } else {  // subnormal: normalise
      int shift = 0;
      while ((mantissa & 0x400) == 0) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3FF;
      out = sign | static_cast<uint32_t>(127 - 15 - shift + 1) << 23 | mantissa << 13;
    }
  } else if (exponent == 0x1F) {
    out = sign | 0x7F800000u | mantissa << 13;
  } else {
    out = sign | (exponent + 127 - 15) << 23 | mantissa << 13;
  }
  float value;
  std::memcpy(&value, &out, sizeof(value));
  return value;
}

float bf16_to_float(uint16_t bits) {
  uint32_t out = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &out, sizeof(value));
  return value;
}

void append_non_finite(std::string& out, double value) {
  out.append(std::isnan(value) ? "\"NaN\"" : value > 0 ? "\"Infinity\"" : "\"-Infinity\"");
}

// float32 values (FP32, FP16 and BF16 arrays as the Python path widens them): float32's
// shortest digits, unless one is not finite, when every value goes as a Python float does.
template <typename Read>
void append_float32s(std::string& out, uint64_t count, Read read) {
  bool finite = true;
  for (uint64_t i = 0; i < count && finite; ++i) finite = std::isfinite(read(i));
  for (uint64_t i = 0; i < count; ++i) {
    if (i > 0) out.push_back(',');
    float value = read(i);
    if (finite) {
      append_float32(out, value);
    } else if (std::isfinite(value)) {
      append_float64(out, static_cast<double>(value));
    } else {
      append_non_finite(out, value);
    }
  }
}

void append_shape(std::string& out, const std::vector<int64_t>& shape) {
  out.push_back('[');
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d > 0) out.push_back(',');
    append_int(out, shape[d]);
  }
  out.push_back(']');
}

uint64_t count_of(const std::vector<int64_t>& shape) {
  uint64_t count = 1;
  for (int64_t d : shape) count *= static_cast<uint64_t>(d);
  return count;
}

void append_string(std::string& out, std::string_view text) {
  out.push_back('"');
  out.append(text);  // plain ASCII without quotes or backslashes (front_requests.h reads no more)
  out.push_back('"');
}

void append_head(std::string& out, std::string_view default_headers, std::string_view extra,
                 std::string_view content_type, size_t length, bool keep_alive) {
  out.append("HTTP/1.1 200 OK\r\n");
  out.append(default_headers);
  out.append(extra);
  out.append("content-type: ");
  out.append(content_type);
  out.append("\r\ncontent-length: ");
  append_uint(out, length);
  out.append("\r\n");
  if (!keep_alive) out.append("connection: close\r\n");
  out.append("\r\n");
}

}  // namespace

void append_json_data(std::string& out, Datatype datatype, const uint8_t* data, uint64_t count) {
  out.push_back('[');
  switch (datatype) {
    case Datatype::F32:
      append_float32s(out, count, [&](uint64_t i) { return load<float>(data, i); });
      break;
    case Datatype::F16:
      append_float32s(out, count,
                      [&](uint64_t i) { return half_to_float(load<uint16_t>(data, i)); });
      break;
    case Datatype::BF16:
      append_float32s(out, count,
                      [&](uint64_t i) { return bf16_to_float(load<uint16_t>(data, i)); });
      break;
    case Datatype::F64:
      for (uint64_t i = 0; i < count; ++i) {
        if (i > 0) out.push_back(',');
        double value = load<double>(data, i);
        if (std::isfinite(value)) {
          append_float64(out, value);
        } else {
          append_non_finite(out, value);
        }
      }
      break;
    case Datatype::Bool:
      for (uint64_t i = 0; i < count; ++i) {
        if (i > 0) out.push_back(',');
        out.append(data[i] != 0 ? "true" : "false");
      }
      break;
    default:
      for (uint64_t i = 0; i < count; ++i) {
        if (i > 0) out.push_back(',');
        switch (datatype) {
          case Datatype::I8: append_int(out, load<int8_t>(data, i)); break;
          case Datatype::I16: append_int(out, load<int16_t>(data, i)); break;
          case Datatype::I32: append_int(out, load<int32_t>(data, i)); break;
          case Datatype::I64: append_int(out, load<int64_t>(data, i)); break;
          case Datatype::U8: append_uint(out, load<uint8_t>(data, i)); break;
          case Datatype::U16: append_uint(out, load<uint16_t>(data, i)); break;
          case Datatype::U32: append_uint(out, load<uint32_t>(data, i)); break;
          default: append_uint(out, load<uint64_t>(data, i)); break;
        }
      }
  }
  out.push_back(']');
}

size_t AnswerBytes::size() const {
  size_t total = head.size();
  for (std::string_view piece : binary) total += piece.size();
  return total;
}

void AnswerBytes::append_to(std::string& out) const {
  out.reserve(out.size() + size());
  out.append(head);
  for (std::string_view piece : binary) out.append(piece);
}

void write_answer(const AnswerPlan& plan, const std::vector<TensorSpec>& specs,
                  const std::vector<Output>& outputs, std::string_view default_headers,
                  AnswerBytes& answer) {
  std::string& out = answer.head;
  answer.binary.clear();
  std::string body;
  body.reserve(256);
  if (plan.protocol == Protocol::Native) {
    body.append("{\"model\":");
    append_string(body, plan.model);
    body.append(",\"method\":");
    append_string(body, plan.method);
    body.append(",\"outputs\":[");
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Output& output = outputs[i];
      const TensorSpec& spec = specs[output.index];
      if (i > 0) body.push_back(',');
      body.append("{\"name\":");
      append_string(body, spec.name);
      body.append(",\"shape\":");
      append_shape(body, output.shape);
      body.append(",\"datatype\":");
      append_string(body, info_of(spec.datatype).name);
      body.append(",\"data\":");
      append_json_data(body, spec.datatype, output.data, count_of(output.shape));
      body.push_back('}');
    }
    body.append("]}");
    append_head(out, default_headers, {}, "application/json", body.size(), plan.keep_alive);
    out.append(body);
    return;
  }
  body.append("{\"model_name\":");
  append_string(body, plan.model);
  body.append(",\"model_version\":");
  append_string(body, plan.version);
  if (plan.has_id) {
    body.append(",\"id\":");
    append_string(body, plan.id);
  }
  body.append(",\"outputs\":[");
  uint64_t binary_bytes = 0;
  bool any_binary = false;  // an empty output sent as binary data is still a binary answer
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Output& output = outputs[i];
    const TensorSpec& spec = specs[output.index];
    uint64_t nbytes = count_of(output.shape) * info_of(spec.datatype).size;
    if (i > 0) body.push_back(',');
    body.append("{\"name\":");
    append_string(body, spec.name);
    body.append(",\"datatype\":");
    append_string(body, info_of(spec.datatype).name);
    body.append(",\"shape\":");
    append_shape(body, output.shape);
    const AnsweredRegion& region = plan.regions[output.index];
    if (region.in_region()) {  // service/shm/refs.py's answer_parameters
      body.append(",\"parameters\":{\"shared_memory_region\":");
      append_string(body, region.region);
      body.append(",\"shared_memory_byte_size\":");
      append_uint(body, nbytes);
      if (region.offset != 0) {
        body.append(",\"shared_memory_offset\":");
        append_uint(body, region.offset);
      }
      body.append("}}");
    } else if (plan.binary[output.index]) {
      body.append(",\"parameters\":{\"binary_data_size\":");
      append_uint(body, nbytes);
      body.append("}}");
      binary_bytes += nbytes;
      any_binary = true;
      answer.binary.emplace_back(reinterpret_cast<const char*>(output.data), nbytes);
    } else {
      body.append(",\"data\":");
      append_json_data(body, spec.datatype, output.data, count_of(output.shape));
      body.push_back('}');
    }
  }
  body.append("]}");
  if (!any_binary) {
    append_head(out, default_headers, {}, "application/json", body.size(), plan.keep_alive);
    out.append(body);
    return;
  }
  std::string extra = "inference-header-content-length: ";
  append_uint(extra, body.size());
  extra.append("\r\n");
  append_head(out, default_headers, extra, "application/octet-stream", body.size() + binary_bytes,
              plan.keep_alive);
  out.append(body);
}

}  // namespace etrt_front
