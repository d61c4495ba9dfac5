#include "tensor_io.h"

#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>

#include <cstdlib>
#include <cstring>

namespace nb = nanobind;
using executorch::aten::ScalarType;
using executorch::runtime::EValue;
using executorch::runtime::Error;
using executorch::runtime::Tag;

namespace ethost {
namespace {

struct DtypeEntry {
  ScalarType type;
  nb::dlpack::dtype_code code;
  uint8_t bits;
  const char* name;
};

constexpr DtypeEntry kDtypes[] = {
    {ScalarType::Byte, nb::dlpack::dtype_code::UInt, 8, "uint8"},
    {ScalarType::Char, nb::dlpack::dtype_code::Int, 8, "int8"},
    {ScalarType::Short, nb::dlpack::dtype_code::Int, 16, "int16"},
    {ScalarType::Int, nb::dlpack::dtype_code::Int, 32, "int32"},
    {ScalarType::Long, nb::dlpack::dtype_code::Int, 64, "int64"},
    {ScalarType::Half, nb::dlpack::dtype_code::Float, 16, "float16"},
    {ScalarType::Float, nb::dlpack::dtype_code::Float, 32, "float32"},
    {ScalarType::Double, nb::dlpack::dtype_code::Float, 64, "float64"},
    {ScalarType::Bool, nb::dlpack::dtype_code::Bool, 8, "bool"},
    {ScalarType::BFloat16, nb::dlpack::dtype_code::Bfloat, 16, "bfloat16"},
    {ScalarType::UInt16, nb::dlpack::dtype_code::UInt, 16, "uint16"},
    {ScalarType::UInt32, nb::dlpack::dtype_code::UInt, 32, "uint32"},
};

const DtypeEntry* find_dtype(ScalarType type) {
  for (const auto& entry : kDtypes) {
    if (entry.type == type) {
      return &entry;
    }
  }
  return nullptr;
}

std::string dlpack_name(nb::dlpack::dtype dtype) {
  for (const auto& entry : kDtypes) {
    if (static_cast<uint8_t>(entry.code) == dtype.code && entry.bits == dtype.bits &&
        dtype.lanes == 1) {
      return entry.name;
    }
  }
  return "dtype(code=" + std::to_string(dtype.code) + ", bits=" + std::to_string(dtype.bits) + ")";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return out + (shape.size() == 1 ? ",)" : ")");
}

std::string python_type_name(nb::handle value) {
  return nb::type_name(value.type()).c_str();
}

Outcome<InputBinding> bind_tensor(nb::handle value, const TensorSpec& spec,
                                  std::vector<InputArray>& keep_alive) {
  InputArray array;
  if (!nb::try_cast(value, array, true)) {
    return HostError::input(spec.index, spec.name,
                            "expected a host array (numpy, buffer protocol or DLPack) of " +
                                std::string(dtype_name(spec.dtype)) + ", got " + python_type_name(value));
  }
  const DtypeEntry* expected = find_dtype(spec.dtype);
  if (expected == nullptr) {
    return HostError::input(spec.index, spec.name,
                            std::string("the program's dtype ") +
                                executorch::runtime::toString(spec.dtype) + " is not supported here");
  }
  nb::dlpack::dtype got = array.dtype();
  if (got.code != static_cast<uint8_t>(expected->code) || got.bits != expected->bits ||
      got.lanes != 1) {
    return HostError::input(spec.index, spec.name,
                            std::string("expected dtype ") + expected->name + ", got " +
                                dlpack_name(got));
  }
  std::vector<int64_t> shape(array.shape_ptr(), array.shape_ptr() + array.ndim());
  std::vector<int64_t> bounds(spec.shape.begin(), spec.shape.end());
  bool fits = shape.size() == bounds.size();
  for (size_t d = 0; fits && d < shape.size(); ++d) {
    fits = spec.dynamic ? shape[d] <= bounds[d] : shape[d] == bounds[d];
  }
  if (!fits) {
    return HostError::input(spec.index, spec.name,
                            "expected shape " + shape_text(bounds) +
                                (spec.dynamic ? " (upper bounds)" : "") + ", got " +
                                shape_text(shape));
  }
  InputBinding binding;
  binding.is_tensor = true;
  binding.dtype = spec.dtype;
  binding.sizes.assign(shape.begin(), shape.end());
  binding.dim_order.resize(shape.size());
  binding.strides.resize(shape.size());
  int32_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    binding.dim_order[d] = static_cast<uint8_t>(d);
    binding.strides[d] = stride;
    stride *= static_cast<int32_t>(shape[d]);
  }
  binding.data = const_cast<void*>(static_cast<const void*>(array.data()));
  keep_alive.push_back(std::move(array));
  return binding;
}

}  // namespace

const char* dtype_name(ScalarType type) {
  const DtypeEntry* entry = find_dtype(type);
  return entry != nullptr ? entry->name : executorch::runtime::toString(type);
}

Outcome<InputBinding> bind_input(nb::handle value, const TensorSpec& spec,
                                 std::vector<InputArray>& keep_alive) {
  if (spec.tag == Tag::Tensor) {
    return bind_tensor(value, spec, keep_alive);
  }
  InputBinding binding;
  // bool before int: Python's bool is an int subclass.
  if (spec.tag == Tag::Bool && PyBool_Check(value.ptr())) {
    binding.scalar = EValue(value.ptr() == Py_True);
  } else if (spec.tag == Tag::Int && PyLong_Check(value.ptr()) && !PyBool_Check(value.ptr())) {
    binding.scalar = EValue(static_cast<int64_t>(nb::cast<int64_t>(value)));
  } else if (spec.tag == Tag::Double && (PyFloat_Check(value.ptr()) || PyLong_Check(value.ptr()))) {
    binding.scalar = EValue(nb::cast<double>(value));
  } else if (spec.tag == Tag::None && value.is_none()) {
    binding.scalar = EValue();
  } else {
    return HostError::input(spec.index, spec.name,
                            std::string("expected a ") + tag_name(spec.tag) + " value, got " +
                                python_type_name(value));
  }
  return binding;
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
    return HostError::executorch(
        Error::NotSupported, "reading outputs of method '" + method + "'", "",
        "output " + std::to_string(index) + " has tag " + tag_name(value.tag) +
            ", which the host cannot return");
  }
  if (find_dtype(out.dtype) == nullptr || out.dtype == ScalarType::BFloat16) {
    return HostError::executorch(
        Error::NotSupported, "reading outputs of method '" + method + "'", "",
        "output " + std::to_string(index) + " has dtype " +
            executorch::runtime::toString(out.dtype) + ", which numpy cannot hold");
  }
  // malloc(0) may return null; numpy still needs a valid pointer for empty arrays.
  void* memory = std::malloc(nbytes > 0 ? nbytes : 1);
  if (memory == nullptr) {
    return HostError::executorch(Error::MemoryAllocationFailed,
                                 "reading outputs of method '" + method + "'", "",
                                 "could not allocate " + std::to_string(nbytes) + " bytes");
  }
  out.data = std::unique_ptr<uint8_t, void (*)(void*)>(static_cast<uint8_t*>(memory), &std::free);
  if (nbytes == 0 || source == nullptr) {
    return out;
  }
  if (from_device == nullptr) {
    std::memcpy(memory, source, nbytes);
    return out;
  }
  Error copied = from_device->to_host(memory, source, nbytes);
  if (copied != Error::Ok) {
    return HostError::executorch(copied, "reading outputs of method '" + method + "'", "",
                                 "copying output " + std::to_string(index) +
                                     " from device memory: " + from_device->last_error());
  }
  return out;
}

nb::object to_numpy(OutputBuffer&& output) {
  if (output.is_none) {
    return nb::none();
  }
  const DtypeEntry* entry = find_dtype(output.dtype);
  nb::dlpack::dtype dtype{static_cast<uint8_t>(entry->code), entry->bits, 1};
  uint8_t* data = output.data.release();
  nb::capsule owner(data, [](void* p) noexcept { std::free(p); });
  nb::ndarray<nb::numpy> array(data, output.shape.size(), output.shape.data(), owner, nullptr,
                               dtype);
  return array.cast();
}

}  // namespace ethost
