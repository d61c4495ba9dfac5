#include "json.h"

#include <cerrno>
#include <cstdlib>

namespace ethost_trt {

using ethost::Error;
using ethost::Outcome;
using ethost::Status;

namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  Outcome<JsonValue> parse() {
    JsonValue out;
    skip_space();
    ETHOST_RETURN_IF_ERROR(value(&out, 0));
    skip_space();
    if (pos_ != s_.size()) return fail("unexpected trailing characters");
    return out;
  }

 private:
  Status fail(const char* why) const {
    return Status(Error::InvalidArgument, std::string(why) + " at byte " + std::to_string(pos_));
  }

  void skip_space() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) {
      ++pos_;
    }
  }

  Status literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(pos_, n, word) != 0) return fail("invalid literal");
    pos_ += n;
    return Status();
  }

  Status value(JsonValue* out, int depth) {
    if (depth > kMaxDepth) return fail("nesting too deep");
    if (pos_ >= s_.size()) return fail("unexpected end of text");
    char c = s_[pos_];
    switch (c) {
      case '{': return object(out, depth);
      case '[': return array(out, depth);
      case '"': out->kind = JsonValue::Kind::String; return string(&out->string);
      case 't':
        out->kind = JsonValue::Kind::Bool;
        out->boolean = true;
        return literal("true");
      case 'f':
        out->kind = JsonValue::Kind::Bool;
        out->boolean = false;
        return literal("false");
      case 'n': out->kind = JsonValue::Kind::Null; return literal("null");
      default: return number(out);
    }
  }

  Status object(JsonValue* out, int depth) {
    out->kind = JsonValue::Kind::Object;
    ++pos_;
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return Status();
    }
    while (true) {
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != '"') return fail("expected a string key");
      std::string key;
      ETHOST_RETURN_IF_ERROR(string(&key));
      if (out->find(key) != nullptr) return fail("duplicate object key");
      skip_space();
      if (pos_ >= s_.size() || s_[pos_] != ':') return fail("expected ':'");
      ++pos_;
      skip_space();
      JsonValue member;
      ETHOST_RETURN_IF_ERROR(value(&member, depth + 1));
      out->object.emplace_back(std::move(key), std::move(member));
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return Status();
      }
      return fail("expected ',' or '}'");
    }
  }

  Status array(JsonValue* out, int depth) {
    out->kind = JsonValue::Kind::Array;
    ++pos_;
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return Status();
    }
    while (true) {
      skip_space();
      JsonValue element;
      ETHOST_RETURN_IF_ERROR(value(&element, depth + 1));
      out->array.push_back(std::move(element));
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return Status();
      }
      return fail("expected ',' or ']'");
    }
  }

  static void append_utf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  Status hex4(uint32_t* out) {
    if (s_.size() - pos_ < 4) return fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char h = s_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9')
        v |= static_cast<uint32_t>(h - '0');
      else if (h >= 'a' && h <= 'f')
        v |= static_cast<uint32_t>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        v |= static_cast<uint32_t>(h - 'A' + 10);
      else
        return fail("invalid \\u escape");
    }
    *out = v;
    return Status();
  }

  Status string(std::string* out) {
    ++pos_;
    while (pos_ < s_.size()) {
      unsigned char c = static_cast<unsigned char>(s_[pos_++]);
      if (c == '"') return Status();
      if (c < 0x20) return fail("control character in string");
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        continue;
      }
      if (pos_ >= s_.size()) break;
      char e = s_[pos_++];
      switch (e) {
        case '"': out->push_back('"'); break;
        case '\\': out->push_back('\\'); break;
        case '/': out->push_back('/'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          ETHOST_RETURN_IF_ERROR(hex4(&cp));
          if (cp >= 0xD800 && cp < 0xDC00) {
            uint32_t low = 0;
            if (s_.compare(pos_, 2, "\\u") != 0) return fail("unpaired surrogate");
            pos_ += 2;
            if (!hex4(&low).ok() || low < 0xDC00 || low > 0xDFFF) return fail("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return fail("unpaired surrogate");
          }
          append_utf8(cp, out);
          break;
        }
        default: return fail("invalid escape");
      }
    }
    return fail("unterminated string");
  }

  Status number(JsonValue* out) {
    size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d;
    };
    size_t int_start = pos_;
    size_t int_digits = digits();
    if (int_digits == 0) return fail("invalid value");
    if (int_digits > 1 && s_[int_start] == '0') return fail("leading zero in number");
    bool integral = true;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      integral = false;
      if (digits() == 0) return fail("invalid number");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      integral = false;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) return fail("invalid number");
    }
    std::string text = s_.substr(start, pos_ - start);
    out->kind = JsonValue::Kind::Number;
    out->number = std::strtod(text.c_str(), nullptr);
    if (integral) {
      errno = 0;
      long long v = std::strtoll(text.c_str(), nullptr, 10);
      out->is_integer = errno != ERANGE;
      out->integer = v;
    }
    return Status();
  }

  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

const JsonValue* JsonValue::find(const std::string& key) const {
  for (const auto& member : object) {
    if (member.first == key) return &member.second;
  }
  return nullptr;
}

ethost::Outcome<JsonValue> parse_json(const std::string& text) {
  return Parser(text).parse();
}

}  // namespace ethost_trt
