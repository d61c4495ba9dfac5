// The JSON reader behind the delegate blob's metadata: what it accepts, and that it refuses
// malformed or hostile text with a reason and byte offset instead of crashing.
#include <string>

#include "check.h"
#include "json.h"

using ethost_trt::JsonValue;
using ethost_trt::parse_json;

namespace {

std::string refusal(const std::string& text) {
  auto parsed = parse_json(text);
  return parsed.ok() ? std::string("(accepted)") : parsed.status().reason;
}

}  // namespace

TEST(objects_keep_member_order_and_find_by_key) {
  auto parsed = parse_json(R"( {"b": 1, "a": [true, null, "x"], "c": {"d": -2.5}} )");
  CHECK(parsed.ok());
  const JsonValue& v = parsed.value();
  CHECK(v.kind == JsonValue::Kind::Object);
  CHECK(v.object.size() == 3 && v.object[0].first == "b" && v.object[2].first == "c");
  const JsonValue* a = v.find("a");
  CHECK(a != nullptr && a->kind == JsonValue::Kind::Array && a->array.size() == 3);
  CHECK(a->array[0].kind == JsonValue::Kind::Bool && a->array[0].boolean);
  CHECK(a->array[1].kind == JsonValue::Kind::Null);
  CHECK(a->array[2].string == "x");
  CHECK(v.find("c")->find("d")->number == -2.5 && !v.find("c")->find("d")->is_integer);
  CHECK(v.find("missing") == nullptr);
}

TEST(integers_are_kept_exactly) {
  // 2^53 + 1 is not representable as a double.
  auto parsed = parse_json("[9007199254740993, -7, 0]");
  CHECK(parsed.ok());
  const auto& a = parsed.value().array;
  CHECK(a[0].is_integer && a[0].integer == 9007199254740993LL);
  CHECK(a[1].is_integer && a[1].integer == -7);
  CHECK(a[2].is_integer && a[2].integer == 0);
  auto huge = parse_json("123456789012345678901234567890");
  CHECK(huge.ok() && !huge.value().is_integer);
}

TEST(string_escapes_and_surrogate_pairs_decode_to_utf8) {
  auto parsed = parse_json(R"("a\"b\\c\n\u00e9\ud83d\ude00")");
  CHECK(parsed.ok());
  CHECK(parsed.value().string == "a\"b\\c\n\xc3\xa9\xf0\x9f\x98\x80");
}

TEST(malformed_text_is_refused_with_a_reason_and_offset) {
  CHECK_CONTAINS(refusal("{\"a\": 1} x"), "unexpected trailing characters at byte 9");
  CHECK_CONTAINS(refusal("[1, 2"), "at byte 5");
  CHECK_CONTAINS(refusal("tru"), "invalid literal");
  CHECK_CONTAINS(refusal("{\"a\": 1, \"a\": 2}"), "duplicate object key");
  CHECK_CONTAINS(refusal("01"), "leading zero in number");
  CHECK_CONTAINS(refusal("1."), "invalid number");
  CHECK_CONTAINS(refusal("\"\\ud83d\""), "unpaired surrogate");
  CHECK_CONTAINS(refusal("\"abc"), "unterminated string");
  CHECK_CONTAINS(refusal(std::string("\"a\x01\"")), "control character in string");
  CHECK_CONTAINS(refusal(""), "unexpected end of text");
  CHECK(parse_json("[1, 2").status().code == ethost::Error::InvalidArgument);
}

TEST(nesting_is_bounded) {
  std::string ok_depth = std::string(64, '[') + std::string(64, ']');
  CHECK(parse_json(ok_depth).ok());
  std::string too_deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK_CONTAINS(refusal(too_deep), "nesting too deep");
}
