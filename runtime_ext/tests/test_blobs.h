// Delegate blobs (TR01 layout) built byte by byte, for the tests of the blob reader and of the
// delegate's init, which parse them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ethost_test {

inline void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

inline void put_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

struct Layout {
  std::string magic = "TR01";
  uint32_t metadata_offset = 32;
  int64_t engine_offset = -1;  // -1: right after the metadata, rounded up to 16
  int64_t engine_size = -1;    // -1: the engine's size
};

// header (32 bytes) + metadata + padding to 16 + engine
inline std::vector<uint8_t> blob(const std::string& metadata, const std::string& engine,
                                 Layout layout = Layout()) {
  size_t meta_end = layout.metadata_offset + metadata.size();
  size_t engine_at = layout.engine_offset >= 0 ? static_cast<size_t>(layout.engine_offset)
                                               : (meta_end + 15) / 16 * 16;
  std::vector<uint8_t> b(std::max(engine_at + engine.size(), meta_end), 0);
  for (int i = 0; i < 4; ++i) b[i] = static_cast<uint8_t>(layout.magic[i]);
  put_u32(b, 4, layout.metadata_offset);
  put_u32(b, 8, static_cast<uint32_t>(metadata.size()));
  put_u32(b, 12, static_cast<uint32_t>(engine_at));
  put_u64(b, 16,
          layout.engine_size >= 0 ? static_cast<uint64_t>(layout.engine_size) : engine.size());
  std::copy(metadata.begin(), metadata.end(), b.begin() + layout.metadata_offset);
  std::copy(engine.begin(), engine.end(), b.begin() + engine_at);
  return b;
}

}  // namespace ethost_test
