#include "http_head.h"

#include <cstring>

namespace etrt_front {
namespace {

// No head the native path takes is longer (uvicorn's own limit is far above).
constexpr size_t kLongestHead = 16 * 1024;
constexpr int kMostFields = 64;

bool token_char(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != 0;
}

bool value_char(unsigned char c) {
  return c == '\t' || (c >= 0x20 && c < 0x7F);
}

bool same_name(std::string_view name, std::string_view lower) {
  if (name.size() != lower.size()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != lower[i]) return false;
  }
  return true;
}

// Whether the comma-separated `value` lists `token` (case-insensitive).
bool lists(std::string_view value, std::string_view token) {
  size_t at = 0;
  while (at <= value.size()) {
    size_t comma = value.find(',', at);
    std::string_view item =
        value.substr(at, comma == std::string_view::npos ? value.npos : comma - at);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (same_name(item, token)) return true;
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  return false;
}

}  // namespace

Head read_head(const char* data, size_t size, RequestHead& head) {
  const char* end = static_cast<const char*>(memmem(data, size, "\r\n\r\n", 4));
  if (end == nullptr) return size < kLongestHead ? Head::Partial : Head::Declined;
  head.length = static_cast<size_t>(end - data) + 4;
  if (head.length > kLongestHead) return Head::Declined;
  std::string_view text(data, static_cast<size_t>(end - data) + 2);  // every line ends in CRLF
  size_t line_end = text.find("\r\n");
  std::string_view line = text.substr(0, line_end);
  // "POST <path> HTTP/1.1"
  constexpr std::string_view kMethod = "POST ";
  constexpr std::string_view kVersion = " HTTP/1.1";
  if (line.size() <= kMethod.size() + kVersion.size() ||
      line.substr(0, kMethod.size()) != kMethod ||
      line.substr(line.size() - kVersion.size()) != kVersion) {
    return Head::Declined;
  }
  head.path = line.substr(kMethod.size(), line.size() - kMethod.size() - kVersion.size());
  if (head.path.empty() || head.path[0] != '/') return Head::Declined;
  for (char c : head.path) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7F || c == '%' || c == '?' || c == '#') return Head::Declined;
  }
  bool has_length = false;
  int fields = 0;
  size_t at = line_end + 2;
  while (at < text.size()) {
    size_t next = text.find("\r\n", at);
    std::string_view field = text.substr(at, next - at);
    at = next + 2;
    if (++fields > kMostFields) return Head::Declined;
    size_t colon = field.find(':');
    if (colon == 0 || colon == std::string_view::npos) return Head::Declined;
    std::string_view name = field.substr(0, colon);
    for (char c : name) {
      if (!token_char(static_cast<unsigned char>(c))) return Head::Declined;
    }
    std::string_view value = field.substr(colon + 1);
    for (char c : value) {
      if (!value_char(static_cast<unsigned char>(c))) return Head::Declined;
    }
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (same_name(name, "content-length")) {
      if (has_length || value.empty() || value.size() > 18) return Head::Declined;
      uint64_t length = 0;
      for (char c : value) {
        if (c < '0' || c > '9') return Head::Declined;
        length = length * 10 + static_cast<uint64_t>(c - '0');
      }
      head.content_length = length;
      has_length = true;
    } else if (same_name(name, "connection")) {
      if (lists(value, "upgrade")) return Head::Declined;
      if (lists(value, "close")) head.keep_alive = false;
    } else if (same_name(name, "authorization")) {
      if (head.has_authorization) return Head::Declined;
      head.has_authorization = true;
      head.authorization = value;
    } else if (same_name(name, "inference-header-content-length")) {
      if (head.has_binary_header) return Head::Declined;
      head.has_binary_header = true;
      head.binary_header = value;
    } else if (same_name(name, "transfer-encoding") || same_name(name, "expect") ||
               same_name(name, "upgrade")) {
      return Head::Declined;
    }
  }
  return has_length ? Head::Complete : Head::Declined;
}

}  // namespace etrt_front
