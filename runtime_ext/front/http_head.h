// The head of an HTTP/1.1 request as the fronts' native path needs it (front_lane.h): which
// route, the body's length, keep-alive, the token and the binary tensor header. It reads the
// plain form only: anything unusual (another method or version, chunked bodies, Expect,
// Upgrade, repeated or malformed fields, escapes in the path, text outside ASCII) is declined,
// so that uvicorn's parser and the Python path see it exactly as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace etrt_front {

struct RequestHead {
  std::string_view path;
  size_t length = 0;  // of the head, its blank line included
  uint64_t content_length = 0;
  bool keep_alive = true;
  bool has_authorization = false;
  std::string_view authorization;
  bool has_binary_header = false;  // Inference-Header-Content-Length
  std::string_view binary_header;
};

enum class Head { Complete, Partial, Declined };

// Reads the head at the start of `data`. Partial: no blank line yet (and not too long to wait).
Head read_head(const char* data, size_t size, RequestHead& head);

}  // namespace etrt_front
