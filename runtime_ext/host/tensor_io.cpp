#include "tensor_io.h"

#include "dtypes.h"

#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>

#include <cstdlib>
#include <cstring>

using executorch::aten::ScalarType;
using executorch::runtime::EValue;

namespace ethost {

const char* dtype_name(ScalarType type) {
  const Dtype* entry = find_dtype(type);
  return entry != nullptr ? entry->name : executorch::runtime::toString(type);
}

Outcome<OutputBuffer> copy_output(const EValue& value, size_t index, const std::string& method,
                                  DeviceCopies* from_device) {
  OutputBuffer out;
  const void* source = nullptr;
  size_t nbytes = 0;
  int64_t int_value = 0;
  double double_value = 0;
  bool bool_value = false;
  if (value.isTensor()) {
    const auto& tensor = value.toTensor();
    out.dtype = tensor.scalar_type();
    out.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
    source = tensor.const_data_ptr();
    nbytes = tensor.nbytes();
  } else if (value.isInt()) {
    out.dtype = ScalarType::Long;
    int_value = value.toInt();
    source = &int_value;
    nbytes = sizeof(int_value);
  } else if (value.isDouble()) {
    out.dtype = ScalarType::Double;
    double_value = value.toDouble();
    source = &double_value;
    nbytes = sizeof(double_value);
  } else if (value.isBool()) {
    out.dtype = ScalarType::Bool;
    bool_value = value.toBool();
    source = &bool_value;
    nbytes = sizeof(bool_value);
  } else if (value.isNone()) {
    out.is_none = true;
    return out;
  } else {
    return Status(Error::NotSupported, "output " + std::to_string(index) + " has tag " +
                                           tag_name(value.tag) + ", which the host cannot return")
        .at("reading outputs of method '" + method + "'", "");
  }
  if (find_dtype(out.dtype) == nullptr) {
    return Status(Error::NotSupported, "output " + std::to_string(index) + " has dtype " +
                                           executorch::runtime::toString(out.dtype) +
                                           ", which numpy cannot hold")
        .at("reading outputs of method '" + method + "'", "");
  }
  // malloc(0) may return null; numpy still needs a valid pointer for empty arrays.
  void* memory = std::malloc(nbytes > 0 ? nbytes : 1);
  if (memory == nullptr) {
    return Status(Error::MemoryAllocationFailed,
                  "could not allocate " + std::to_string(nbytes) + " bytes")
        .at("reading outputs of method '" + method + "'", "");
  }
  out.data = std::unique_ptr<uint8_t, void (*)(void*)>(static_cast<uint8_t*>(memory), &std::free);
  if (nbytes == 0 || source == nullptr) {
    return out;
  }
  if (from_device == nullptr) {
    std::memcpy(memory, source, nbytes);
    return out;
  }
  Status copied = from_device->to_host(memory, source, nbytes);
  if (!copied.ok()) {
    copied.reason =
        "copying output " + std::to_string(index) + " from device memory: " + copied.reason;
    return copied.at("reading outputs of method '" + method + "'", "");
  }
  return out;
}

}  // namespace ethost
