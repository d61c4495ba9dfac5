// numpy dtype names, the vocabulary the engine providers (and the service) speak.
#pragma once

#include <cstddef>
#include <string>

#include <executorch/runtime/core/exec_aten/exec_aten.h>

namespace ethost_trt {

inline const char* dtype_name(executorch::aten::ScalarType t) {
  using S = executorch::aten::ScalarType;
  switch (t) {
    case S::Float: return "float32";
    case S::Half: return "float16";
    case S::BFloat16: return "bfloat16";
    case S::Double: return "float64";
    case S::Int: return "int32";
    case S::Long: return "int64";
    case S::Short: return "int16";
    case S::Char: return "int8";
    case S::Byte: return "uint8";
    case S::Bool: return "bool";
    default: return "";
  }
}

// 0 for a name this module does not know.
inline size_t dtype_size(const std::string& name) {
  if (name == "float32" || name == "int32") return 4;
  if (name == "float16" || name == "bfloat16" || name == "int16") return 2;
  if (name == "float64" || name == "int64") return 8;
  if (name == "int8" || name == "uint8" || name == "bool") return 1;
  return 0;
}

}  // namespace ethost_trt
