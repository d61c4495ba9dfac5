#include "json_reader.h"

#include <charconv>
#include <cstring>

namespace etrt_front {

void JsonReader::whitespace() {
  while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
}

bool JsonReader::take(char c) {
  whitespace();
  if (p_ < end_ && *p_ == c) {
    ++p_;
    return true;
  }
  return fail();
}

JsonReader::Kind JsonReader::peek() {
  whitespace();
  if (p_ >= end_) return Kind::Bad;
  switch (*p_) {
    case '{': return Kind::Object;
    case '[': return Kind::Array;
    case '"': return Kind::String;
    case 't': return Kind::True;
    case 'f': return Kind::False;
    case 'n': return Kind::Null;
    default: return (*p_ == '-' || (*p_ >= '0' && *p_ <= '9')) ? Kind::Number : Kind::Bad;
  }
}

bool JsonReader::next_key(bool& first, std::string_view& key) {
  whitespace();
  if (p_ < end_ && *p_ == '}') {
    ++p_;
    return false;
  }
  if (!first && !take(',')) return false;
  first = false;
  return string(key) && take(':');
}

bool JsonReader::next_element(bool& first) {
  whitespace();
  if (p_ < end_ && *p_ == ']') {
    ++p_;
    return false;
  }
  if (!first && !take(',')) return false;
  first = false;
  return true;
}

bool JsonReader::string(std::string_view& out) {
  if (!take('"')) return false;
  const char* start = p_;
  while (p_ < end_) {
    unsigned char c = static_cast<unsigned char>(*p_);
    if (c == '"') {
      out = std::string_view(start, static_cast<size_t>(p_ - start));
      ++p_;
      return true;
    }
    // Escapes and non-ASCII text are the Python path's to read (and control characters are
    // not JSON at all).
    if (c == '\\' || c < 0x20 || c >= 0x80) return fail();
    ++p_;
  }
  return fail();
}

bool JsonReader::number(JsonNumber& out) {
  whitespace();
  const char* start = p_;
  if (p_ < end_ && *p_ == '-') ++p_;
  if (p_ >= end_) return fail();
  if (*p_ == '0') {
    ++p_;
  } else if (*p_ >= '1' && *p_ <= '9') {
    while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
  } else {
    return fail();
  }
  bool integral = true;
  if (p_ < end_ && *p_ == '.') {
    integral = false;
    ++p_;
    const char* digits = p_;
    while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    if (p_ == digits) return fail();
  }
  if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
    integral = false;
    ++p_;
    if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
    const char* digits = p_;
    while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    if (p_ == digits) return fail();
  }
  out.is_integer = false;
  if (integral) {
    auto parsed = std::from_chars(start, p_, out.integer);
    if (parsed.ec != std::errc() || parsed.ptr != p_) return fail();  // beyond 64 bits
    out.is_integer = true;
    out.value = static_cast<double>(out.integer);
    return true;
  }
  auto parsed = std::from_chars(start, p_, out.value);
  // Out of double's range: the Python path names the value.
  return (parsed.ec == std::errc() && parsed.ptr == p_) || fail();
}

bool JsonReader::literal(std::string_view word) {
  whitespace();
  if (static_cast<size_t>(end_ - p_) < word.size() ||
      std::memcmp(p_, word.data(), word.size()) != 0) {
    return fail();
  }
  p_ += word.size();
  return true;
}

bool JsonReader::boolean(bool& out) {
  Kind kind = peek();
  if (kind == Kind::True) {
    out = true;
    return literal("true");
  }
  if (kind == Kind::False) {
    out = false;
    return literal("false");
  }
  return fail();
}

bool JsonReader::null() {
  return literal("null");
}

bool JsonReader::skip(int depth) {
  if (depth <= 0) return fail();
  std::string_view text;
  JsonNumber number_value;
  bool flag;
  switch (peek()) {
    case Kind::Object: {
      begin_object();
      bool first = true;
      std::string_view key;
      while (next_key(first, key)) {
        if (!skip(depth - 1)) return false;
      }
      return !failed_;
    }
    case Kind::Array: {
      begin_array();
      bool first = true;
      while (next_element(first)) {
        if (!skip(depth - 1)) return false;
      }
      return !failed_;
    }
    case Kind::String: return string(text);
    case Kind::Number: return number(number_value);
    case Kind::True:
    case Kind::False: return boolean(flag);
    case Kind::Null: return null();
    default: return fail();
  }
}

bool JsonReader::at_end() {
  whitespace();
  return p_ == end_;
}

}  // namespace etrt_front
