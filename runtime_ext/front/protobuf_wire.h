// The protobuf wire format as the fronts' gRPC reader and writer need it (grpc_infer.h): varints,
// tags and length-delimited fields, read forward without copying and written onto strings. No
// protobuf library: the messages' field numbers live with their reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace etrt_front::protobuf_wire {

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

inline void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

inline void put_tag(std::string& out, uint32_t number, uint32_t type) {
  put_varint(out, uint64_t{number} << 3 | type);
}

// A length-delimited field; proto3 leaves an empty string out.
inline void put_text(std::string& out, uint32_t number, std::string_view text) {
  if (text.empty()) return;
  put_tag(out, number, kLengthDelimited);
  put_varint(out, text.size());
  out.append(text);
}

inline size_t varint_size(uint64_t value) {
  size_t size = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++size;
  }
  return size;
}

}  // namespace etrt_front::protobuf_wire
