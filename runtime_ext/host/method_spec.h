// What a caller needs to know about a method's signature, in plain C++ types, so that input
// validation and the Python metadata dict read the same facts.
#pragma once

#include "status.h"

#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/method_meta.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ethost {

struct TensorSpec {
  size_t index = 0;
  executorch::runtime::Tag tag = executorch::runtime::Tag::None;
  bool is_tensor = false;
  executorch::aten::ScalarType dtype = executorch::aten::ScalarType::Float;
  std::vector<int32_t> shape;  // upper bounds for dynamic tensors
  bool dynamic = false;
  bool memory_planned = false;
  // An input only delegates taking device memory read: one in device memory is bound as is.
  bool read_by_device_delegates_only = false;
  size_t nbytes = 0;
  std::string name;  // "input 0", with the program's own name appended when it has one
};

struct PlannedBufferSpec {
  int64_t size = 0;
  std::string device;
};

struct MethodSpec {
  std::string name;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::vector<std::string> delegates;
  std::vector<PlannedBufferSpec> planned_buffers;
};

const char* tag_name(executorch::runtime::Tag tag);

// Shape dynamism is only recorded on the loaded tensors, hence the Method.
Outcome<MethodSpec> describe_method(const executorch::runtime::MethodMeta& meta,
                                    const executorch::runtime::Method& method,
                                    const std::string& path);

}  // namespace ethost
