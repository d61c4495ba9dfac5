// A strict, small JSON reader for the delegate blob's metadata. The blob comes from a file a
// user uploaded, so the parser bounds its nesting depth and never throws: failures come back as
// a Status with the reason and byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "status.h"

namespace ethost_trt {

class JsonValue {
 public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Kind kind = Kind::Null;
  bool boolean = false;
  double number = 0.0;
  // Integers are kept exactly: a shape dimension or a device id must not go through a double.
  bool is_integer = false;
  int64_t integer = 0;
  std::string string;
  std::vector<JsonValue> array;
  // Object members keep their order; lookups are linear because metadata objects are tiny.
  std::vector<std::pair<std::string, JsonValue>> object;

  const JsonValue* find(const std::string& key) const;
};

// Parses the whole of `text`; trailing non-space characters are an error (InvalidArgument, with
// the byte offset), as is anything else that is not valid JSON.
ethost::Outcome<JsonValue> parse_json(const std::string& text);

}  // namespace ethost_trt
