// The HTTP head reader (http_head.h) over arbitrary bytes: whatever it reads lies inside them,
// a complete head ends at its blank line, and a partial one has none yet.
#include "front_fixture.h"
#include "http_head.h"

#include <cstring>
#include <string_view>

using fuzz_fixture::require;

namespace {

bool inside(std::string_view part, const char* data, size_t size) {
  return part.empty() || (part.data() >= data && part.data() + part.size() <= data + size);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  const char* data = reinterpret_cast<const char*>(bytes);
  etrt_front::RequestHead head;
  switch (etrt_front::read_head(data, size, head)) {
    case etrt_front::Head::Complete:
      require(head.length >= 4 && head.length <= size, "the head lies inside the bytes");
      require(std::memcmp(data + head.length - 4, "\r\n\r\n", 4) == 0, "it ends at a blank line");
      require(!head.path.empty() && head.path[0] == '/', "its path starts with /");
      require(inside(head.path, data, head.length), "the path lies inside the head");
      require(inside(head.authorization, data, head.length), "so does the token");
      require(inside(head.binary_header, data, head.length), "and the binary header's length");
      break;
    case etrt_front::Head::Partial:
      require(memmem(data, size, "\r\n\r\n", 4) == nullptr, "a partial head has no blank line");
      break;
    case etrt_front::Head::Declined: break;
  }
  return 0;
}
