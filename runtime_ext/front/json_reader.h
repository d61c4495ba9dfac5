// A pull reader over one JSON document for the fronts' request bodies: small, allocation-free,
// and strict. It accepts less than JSON allows (no escapes, no bytes outside ASCII in strings,
// integers only within 64 bits): whatever it refuses, the caller hands to the Python path,
// which accepts or refuses it exactly as before. Nothing here throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace etrt_front {

struct JsonNumber {
  bool is_integer = false;  // written without fraction or exponent, and within int64
  int64_t integer = 0;
  double value = 0;  // the number, rounded to the nearest double (integers too)
};

class JsonReader {
 public:
  JsonReader(const char* begin, const char* end) : p_(begin), end_(end) {}

  enum class Kind { Object, Array, String, Number, True, False, Null, Bad };
  // The kind of the next value (after whitespace), without consuming it.
  Kind peek();

  bool begin_object() { return take('{'); }
  // The next member's key (its ':' consumed); false at the object's end ('}' consumed) or on an
  // error (failed() says which). `first`: true before the first member, kept by the caller.
  bool next_key(bool& first, std::string_view& key);
  bool begin_array() { return take('['); }
  // Whether another element follows (a ',' consumed between them); false at ']' (consumed).
  bool next_element(bool& first);

  bool string(std::string_view& out);
  bool number(JsonNumber& out);
  bool boolean(bool& out);
  bool null();
  // Skips one value of any kind, nested at most `depth` deep.
  bool skip(int depth = 32);
  // Only whitespace is left.
  bool at_end();
  // Where the next value starts (after whitespace): with skip(), a value's text.
  const char* position() {
    whitespace();
    return p_;
  }

  bool failed() const { return failed_; }

 private:
  void whitespace();
  bool take(char c);
  bool literal(std::string_view word);
  bool fail() {
    failed_ = true;
    return false;
  }

  const char* p_;
  const char* end_;
  bool failed_ = false;
};

}  // namespace etrt_front
