// The values of a taken request's inputs, written into their arena slot: binary bytes as they
// came, JSON lists converted exactly as the Python codecs convert them (json_tensors.py), or
// declined (front_requests.h's write_values).
#include "front_requests.h"

#include "json_reader.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace etrt_front {
namespace {

// Integers a double holds exactly: beyond them, converting to a float type could round twice.
constexpr int64_t kExactInDouble = int64_t{1} << 53;

bool exact_in_double(int64_t value) {
  return -kExactInDouble <= value && value <= kExactInDouble;
}

template <typename T>
void store(uint8_t* into, size_t index, T value) {
  std::memcpy(into + index * sizeof(T), &value, sizeof(T));
}

template <typename T>
bool integer_into(const JsonNumber& number, uint8_t* into, size_t index) {
  if (!number.is_integer) return false;  // 2.0 for an integer type: the Python path checks it
  using Limits = std::numeric_limits<T>;
  if (number.integer < static_cast<int64_t>(Limits::min())) return false;
  if (std::is_same_v<T, uint64_t>) {
    if (number.integer < 0) return false;
  } else if (number.integer > static_cast<int64_t>(Limits::max())) {
    return false;
  }
  store<T>(into, index, static_cast<T>(number.integer));
  return true;
}

}  // namespace

bool write_values(const GivenInput& input, uint8_t* into) {
  if (input.bytes != nullptr) {
    std::memcpy(into, input.bytes, input.count * input.datatype->size);
    return true;
  }
  JsonReader reader(input.data_begin, input.data_end);
  if (!reader.begin_array()) return false;
  bool first = true;
  uint64_t index = 0;
  Datatype type = input.datatype->type;
  while (reader.next_element(first)) {
    if (index == input.count) return false;
    if (type == Datatype::Bool) {
      bool flag;
      if (!reader.boolean(flag)) return false;
      into[index++] = flag ? 1 : 0;
      continue;
    }
    JsonNumber number;
    if (reader.peek() != JsonReader::Kind::Number || !reader.number(number)) return false;
    bool ok = true;
    switch (type) {
      case Datatype::F32:
        if ((number.is_integer && !exact_in_double(number.integer)) ||
            std::fabs(number.value) > FLT_MAX) {
          return false;
        }
        store<float>(into, index, static_cast<float>(number.value));
        break;
      case Datatype::F64:
        if (number.is_integer && !exact_in_double(number.integer)) return false;
        store<double>(into, index, number.value);
        break;
      case Datatype::I8: ok = integer_into<int8_t>(number, into, index); break;
      case Datatype::I16: ok = integer_into<int16_t>(number, into, index); break;
      case Datatype::I32: ok = integer_into<int32_t>(number, into, index); break;
      case Datatype::I64: ok = integer_into<int64_t>(number, into, index); break;
      case Datatype::U8: ok = integer_into<uint8_t>(number, into, index); break;
      case Datatype::U16: ok = integer_into<uint16_t>(number, into, index); break;
      case Datatype::U32: ok = integer_into<uint32_t>(number, into, index); break;
      case Datatype::U64: ok = integer_into<uint64_t>(number, into, index); break;
      default:  // FP16 and BF16 round as numpy does: the Python path's
        return false;
    }
    if (!ok) return false;
    ++index;
  }
  return !reader.failed() && index == input.count && reader.at_end();
}

}  // namespace etrt_front
