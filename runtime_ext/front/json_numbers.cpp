#include "json_numbers.h"

#include <charconv>
#include <cmath>

namespace etrt_front {
namespace {

// Lays out shortest `digits` (no sign, no point) with decimal exponent `kk` (the value is
// 0.digits x 10^kk), plain when low < kk <= high, as orjson does.
void lay_out(std::string& out, bool negative, const char* digits, int count, int kk, int low,
             int high) {
  if (negative) out.push_back('-');
  if (low < kk && kk <= high) {
    if (kk >= count) {  // 1234e3 -> 1234000.0
      out.append(digits, static_cast<size_t>(count));
      out.append(static_cast<size_t>(kk - count), '0');
      out.append(".0");
    } else if (kk > 0) {  // 1234e-2 -> 12.34
      out.append(digits, static_cast<size_t>(kk));
      out.push_back('.');
      out.append(digits + kk, static_cast<size_t>(count - kk));
    } else {  // 1234e-6 -> 0.001234
      out.append("0.");
      out.append(static_cast<size_t>(-kk), '0');
      out.append(digits, static_cast<size_t>(count));
    }
    return;
  }
  out.push_back(digits[0]);
  if (count > 1) {
    out.push_back('.');
    out.append(digits + 1, static_cast<size_t>(count - 1));
  }
  int exponent = kk - 1;
  out.push_back('e');
  out.push_back(exponent < 0 ? '-' : '+');
  char buffer[8];
  auto written =
      std::to_chars(buffer, buffer + sizeof(buffer), exponent < 0 ? -exponent : exponent);
  out.append(buffer, written.ptr);
}

template <typename T>
void append_shortest(std::string& out, T value, int low, int high) {
  if (value == 0) {
    out.append(std::signbit(value) ? "-0.0" : "0.0");
    return;
  }
  // Shortest round-trip digits in scientific form: [-]d[.ddd]e(+|-)XX.
  char buffer[64];
  auto written =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  const char* p = buffer;
  bool negative = *p == '-';
  if (negative) ++p;
  char digits[32];
  int count = 0;
  while (p < written.ptr && *p != 'e') {
    if (*p != '.') digits[count++] = *p;
    ++p;
  }
  int exponent = 0;
  std::from_chars(p + 1 + (p[1] == '+'), written.ptr, exponent);
  lay_out(out, negative, digits, count, exponent + 1, low, high);
}

}  // namespace

void append_float32(std::string& out, float value) {
  append_shortest(out, value, -6, 13);
}

void append_float64(std::string& out, double value) {
  append_shortest(out, value, -5, 16);
}

void append_int(std::string& out, int64_t value) {
  char buffer[24];
  auto written = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out.append(buffer, written.ptr);
}

void append_uint(std::string& out, uint64_t value) {
  char buffer[24];
  auto written = std::to_chars(buffer, buffer + sizeof(buffer), value);
  out.append(buffer, written.ptr);
}

}  // namespace etrt_front
