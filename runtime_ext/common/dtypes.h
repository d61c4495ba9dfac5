// The one table of tensor dtypes the native code knows: ExecuTorch's scalar type, the numpy name
// (the vocabulary engine providers and the service speak), and the DLPack type code and width
// the host's array interchange checks.
#pragma once

#include <executorch/runtime/core/exec_aten/exec_aten.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ethost {

// DLPack's DLDataTypeCode values, so the bindings can compare them with an array's dtype as is.
enum class DtypeCode : uint8_t { Int = 0, UInt = 1, Float = 2, Bfloat = 4, Bool = 6 };

struct Dtype {
  executorch::aten::ScalarType type;
  DtypeCode code;
  uint8_t bits;
  const char* name;
  size_t size() const { return bits / 8; }
};

inline constexpr Dtype kDtypes[] = {
    {executorch::aten::ScalarType::Byte, DtypeCode::UInt, 8, "uint8"},
    {executorch::aten::ScalarType::Char, DtypeCode::Int, 8, "int8"},
    {executorch::aten::ScalarType::Short, DtypeCode::Int, 16, "int16"},
    {executorch::aten::ScalarType::Int, DtypeCode::Int, 32, "int32"},
    {executorch::aten::ScalarType::Long, DtypeCode::Int, 64, "int64"},
    {executorch::aten::ScalarType::Half, DtypeCode::Float, 16, "float16"},
    {executorch::aten::ScalarType::Float, DtypeCode::Float, 32, "float32"},
    {executorch::aten::ScalarType::Double, DtypeCode::Float, 64, "float64"},
    {executorch::aten::ScalarType::Bool, DtypeCode::Bool, 8, "bool"},
    {executorch::aten::ScalarType::BFloat16, DtypeCode::Bfloat, 16, "bfloat16"},
    {executorch::aten::ScalarType::UInt16, DtypeCode::UInt, 16, "uint16"},
    {executorch::aten::ScalarType::UInt32, DtypeCode::UInt, 32, "uint32"},
};

// Null for a type or name outside the table.
inline const Dtype* find_dtype(executorch::aten::ScalarType type) {
  for (const Dtype& d : kDtypes) {
    if (d.type == type) return &d;
  }
  return nullptr;
}

inline const Dtype* find_dtype(std::string_view name) {
  for (const Dtype& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

}  // namespace ethost
