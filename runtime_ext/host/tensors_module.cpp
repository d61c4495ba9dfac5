#include "tensors_module.h"

#include "dtypes.h"

#include <executorch/runtime/core/exec_aten/util/scalar_type_util.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace nb = nanobind;
using executorch::aten::ScalarType;
using executorch::runtime::Error;
using executorch::runtime::EValue;
using executorch::runtime::Tag;

namespace ethost {
namespace {

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

// The dtype a buffer-protocol format denotes, for native little-endian scalars; nullptr for
// anything else (the DLPack path then reports it precisely).
const Dtype* buffer_dtype(const Py_buffer& view) {
  const char* format = view.format != nullptr ? view.format : "B";
  if (*format == '@' || *format == '=' || *format == '<') ++format;
  if (format[0] == '\0' || format[1] != '\0') return nullptr;
  ScalarType type;
  switch (format[0]) {
    case 'e': type = ScalarType::Half; break;
    case 'f': type = ScalarType::Float; break;
    case 'd': type = ScalarType::Double; break;
    case 'b': type = ScalarType::Char; break;
    case 'B': type = ScalarType::Byte; break;
    case '?': type = ScalarType::Bool; break;
    case 'h': type = ScalarType::Short; break;
    case 'H': type = ScalarType::UInt16; break;
    case 'i': type = ScalarType::Int; break;
    case 'I': type = ScalarType::UInt32; break;
    case 'l':
    case 'q': type = ScalarType::Long; break;
    default: return nullptr;
  }
  const Dtype* entry = find_dtype(type);
  return entry != nullptr && view.itemsize == entry->bits / 8 ? entry : nullptr;
}

// A C-contiguous buffer of a known dtype; false (and no Python error set) otherwise.
bool view_buffer(nb::handle value, Py_buffer& view, const Dtype*& dtype) {
  if (!PyObject_CheckBuffer(value.ptr())) return false;
  if (PyObject_GetBuffer(value.ptr(), &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
    PyErr_Clear();
    return false;
  }
  dtype = buffer_dtype(view);
  if (dtype == nullptr) {
    PyBuffer_Release(&view);
    return false;
  }
  return true;
}

// numpy has no bfloat16: bfloat16 tensors cross into and out of Python as uint16 arrays holding
// the bit patterns (the server's BF16 carrier), the same bytes ExecuTorch reads and writes.
const Dtype* numpy_carrier(const Dtype* entry) {
  return entry->type == ScalarType::BFloat16 ? find_dtype(ScalarType::UInt16) : entry;
}

bool dlpack_matches(nb::dlpack::dtype got, const Dtype* entry) {
  return got.code == static_cast<uint8_t>(entry->code) && got.bits == entry->bits && got.lanes == 1;
}

// The dtype a __cuda_array_interface__ typestr ("<f4", "|u1", "|b1") denotes; nullptr otherwise.
const Dtype* typestr_dtype(const std::string& typestr) {
  if (typestr.size() < 3 || (typestr[0] != '<' && typestr[0] != '|' && typestr[0] != '=')) {
    return nullptr;
  }
  DtypeCode code;
  switch (typestr[1]) {
    case 'f': code = DtypeCode::Float; break;
    case 'i': code = DtypeCode::Int; break;
    case 'u': code = DtypeCode::UInt; break;
    case 'b': code = DtypeCode::Bool; break;
    default: return nullptr;
  }
  int bytes = std::atoi(typestr.c_str() + 2);
  for (const auto& entry : kDtypes) {
    if (entry.code == code && entry.bits == bytes * 8) return &entry;
  }
  return nullptr;
}

// An array in device memory, described by the CUDA array interface (version 2 and later): its
// address, shape and typestr, C-contiguous. Nothing is read from the memory itself here.
struct DeviceArray {
  const Dtype* dtype = nullptr;
  std::array<int64_t, kMaxInputDims> shape{};
  size_t ndim = 0;
  void* data = nullptr;
};

// nullopt when `value` has no __cuda_array_interface__ (and no Python error set).
std::optional<Outcome<DeviceArray>> device_array(nb::handle value, const TensorSpec& spec) {
  PyObject* raw = PyObject_GetAttrString(value.ptr(), "__cuda_array_interface__");
  if (raw == nullptr) {
    PyErr_Clear();
    return std::nullopt;
  }
  nb::object described = nb::steal(raw);
  auto refuse = [&](const std::string& why) -> Outcome<DeviceArray> {
    return Status::input(spec.index, spec.name, "its __cuda_array_interface__ " + why);
  };
  if (!nb::isinstance<nb::dict>(described)) return refuse("is not a dict");
  nb::dict fields = nb::borrow<nb::dict>(described);
  if (!fields.contains("shape") || !fields.contains("typestr") || !fields.contains("data")) {
    return refuse("lacks shape, typestr or data");
  }
  DeviceArray out;
  nb::tuple shape, data;
  std::string typestr;
  if (!nb::try_cast(fields["shape"], shape) || !nb::try_cast(fields["typestr"], typestr) ||
      !nb::try_cast(fields["data"], data) || data.size() < 1) {
    return refuse("has a shape, typestr or data of the wrong type");
  }
  if (shape.size() > kMaxInputDims) return refuse("has too many dimensions");
  int64_t count = 1;
  out.ndim = shape.size();
  for (size_t d = 0; d < out.ndim; ++d) {
    if (!nb::try_cast(shape[d], out.shape[d]) || out.shape[d] < 0) {
      return refuse("has a shape that is not non-negative integers");
    }
    count *= out.shape[d];
  }
  out.dtype = typestr_dtype(typestr);
  if (out.dtype == nullptr) return refuse("has typestr '" + typestr + "', which is not supported");
  if (fields.contains("strides") && !fields["strides"].is_none()) {
    nb::tuple strides;
    bool contiguous = nb::try_cast(fields["strides"], strides) && strides.size() == out.ndim;
    int64_t expected = static_cast<int64_t>(out.dtype->size());
    for (size_t d = out.ndim; contiguous && d-- > 0;) {
      int64_t stride = 0;
      contiguous = nb::try_cast(strides[d], stride) && (stride == expected || out.shape[d] == 1);
      expected *= out.shape[d];
    }
    if (!contiguous) return refuse("describes a strided array; only C-contiguous ones are read");
  }
  uintptr_t address = 0;
  if (!nb::try_cast(data[0], address)) return refuse("has a data address that is not an integer");
  if (address == 0 && count > 0) return refuse("has a null data address");
  out.data = reinterpret_cast<void*>(address);
  return Outcome<DeviceArray>(out);
}

Outcome<InputBinding> bind_tensor(nb::handle value, const TensorSpec& spec,
                                  std::vector<HeldInput>& keep_alive) {
  const Dtype* expected = find_dtype(spec.dtype);
  if (expected == nullptr) {
    return Status::input(spec.index, spec.name,
                         std::string("the program's dtype ") +
                             executorch::runtime::toString(spec.dtype) + " is not supported here");
  }
  const Py_ssize_t* view_shape = nullptr;
  const int64_t* array_shape = nullptr;
  size_t ndim = 0;
  const void* data = nullptr;
  Py_buffer view;
  const Dtype* viewed = nullptr;
  DeviceArray device;
  bool on_device = false;
  if (view_buffer(value, view, viewed)) {
    keep_alive.emplace_back(view);
    if (viewed != expected && viewed != numpy_carrier(expected)) {
      return Status::input(
          spec.index, spec.name,
          std::string("expected dtype ") + expected->name + ", got " + viewed->name);
    }
    view_shape = view.shape;
    ndim = static_cast<size_t>(view.ndim);
    data = view.buf;
  } else if (auto described = device_array(value, spec)) {
    if (!described->ok()) return described->take_status();
    device = described->take();
    if (device.dtype != expected && device.dtype != numpy_carrier(expected)) {
      return Status::input(
          spec.index, spec.name,
          std::string("expected dtype ") + expected->name + ", got " + device.dtype->name);
    }
    array_shape = device.shape.data();
    ndim = device.ndim;
    data = device.data;
    on_device = true;
  } else {
    InputArray array;
    if (!nb::try_cast(value, array, true)) {
      return Status::input(
          spec.index, spec.name,
          "expected a host array (numpy, buffer protocol or DLPack) or a device array "
          "(__cuda_array_interface__) of " +
              std::string(dtype_name(spec.dtype)) + ", got " + python_type_name(value));
    }
    nb::dlpack::dtype got = array.dtype();
    if (!dlpack_matches(got, expected) && !dlpack_matches(got, numpy_carrier(expected))) {
      return Status::input(
          spec.index, spec.name,
          std::string("expected dtype ") + expected->name + ", got " + dlpack_name(got));
    }
    array_shape = array.shape_ptr();
    ndim = array.ndim();
    data = array.data();
    keep_alive.emplace_back(std::move(array));
  }
  auto extent = [&](size_t d) -> int64_t {
    return view_shape != nullptr ? static_cast<int64_t>(view_shape[d]) : array_shape[d];
  };
  // The program's shapes never exceed kMaxInputDims, so a fitting input fits the binding.
  bool fits = ndim == spec.shape.size();
  for (size_t d = 0; fits && d < ndim; ++d) {
    fits = spec.dynamic ? extent(d) <= spec.shape[d] : extent(d) == spec.shape[d];
  }
  if (!fits) {
    std::vector<int64_t> got(ndim);
    for (size_t d = 0; d < ndim; ++d) got[d] = extent(d);
    return Status::input(spec.index, spec.name,
                         "expected shape " + shape_text({spec.shape.begin(), spec.shape.end()}) +
                             (spec.dynamic ? " (upper bounds)" : "") + ", got " + shape_text(got));
  }
  InputBinding binding;
  binding.is_tensor = true;
  binding.dtype = spec.dtype;
  binding.ndim = ndim;
  int32_t stride = 1;
  for (size_t d = ndim; d-- > 0;) {
    binding.sizes[d] = static_cast<int32_t>(extent(d));
    binding.dim_order[d] = static_cast<uint8_t>(d);
    binding.strides[d] = stride;
    stride *= binding.sizes[d];
  }
  binding.data = const_cast<void*>(data);
  binding.on_device = on_device;
  return binding;
}

}  // namespace

Outcome<InputBinding> bind_input(nb::handle value, const TensorSpec& spec,
                                 std::vector<HeldInput>& keep_alive) {
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
    return Status::input(
        spec.index, spec.name,
        std::string("expected a ") + tag_name(spec.tag) + " value, got " + python_type_name(value));
  }
  return binding;
}

namespace {

// Outputs up to this size are copied into an array from numpy.empty: creating that is several
// times cheaper than wrapping our buffer (capsule + DLPack conversion), and for small outputs
// that creation, not the copy, is what a call costs.
constexpr size_t kCopyIntoNumpyUpTo = 64 * 1024;

// numpy.empty and one numpy dtype object per entry of kDtypes, looked up once. Deliberately
// leaked: they must outlive every call, including calls made during interpreter shutdown.
nb::handle numpy_empty() {
  static nb::handle empty = nb::object(nb::module_::import_("numpy").attr("empty")).release();
  return empty;
}

nb::handle numpy_dtype(const Dtype* entry) {
  static std::vector<nb::handle> dtypes = [] {
    nb::object dtype = nb::module_::import_("numpy").attr("dtype");
    std::vector<nb::handle> out;
    // numpy has no bfloat16; such outputs arrive here as their uint16 carrier (to_numpy).
    for (const auto& e : kDtypes) {
      out.push_back(e.type == ScalarType::BFloat16 ? nb::handle() : dtype(e.name).release());
    }
    return out;
  }();
  return dtypes[static_cast<size_t>(entry - kDtypes)];
}

std::optional<nb::object> copy_into_numpy(const OutputBuffer& output, const Dtype* entry) {
  size_t nbytes = entry->bits / 8;
  for (size_t extent : output.shape) nbytes *= extent;
  if (nbytes > kCopyIntoNumpyUpTo) return std::nullopt;
  nb::object shape = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(output.shape.size())));
  for (size_t d = 0; d < output.shape.size(); ++d) {
    PyTuple_SET_ITEM(shape.ptr(), static_cast<Py_ssize_t>(d), PyLong_FromSize_t(output.shape[d]));
  }
  nb::object array = numpy_empty()(shape, numpy_dtype(entry));
  Py_buffer view;
  if (PyObject_GetBuffer(array.ptr(), &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
    throw nb::python_error();
  }
  std::memcpy(view.buf, output.data.get(), nbytes);
  PyBuffer_Release(&view);
  return array;
}

}  // namespace

Outcome<OutputDestination> bind_output_destination(nb::handle value, const TensorSpec& spec) {
  OutputDestination dest;
  if (value.is_none()) return dest;
  if (auto described = device_array(value, spec)) {
    if (!described->ok()) return described->take_status();
    DeviceArray device = described->take();
    size_t nbytes = device.dtype->size();
    for (size_t d = 0; d < device.ndim; ++d) nbytes *= static_cast<size_t>(device.shape[d]);
    dest.data = nbytes > 0 ? device.data : nullptr;
    dest.nbytes = nbytes;
    return dest;
  }
  // Host memory: the buffer's bytes, whatever its element type. The view is released at once;
  // the caller's sequence keeps the object (and so its memory) alive until execute returns.
  Py_buffer view;
  if (PyObject_GetBuffer(value.ptr(), &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
    PyErr_Clear();
    return Status::input(spec.index, spec.name,
                         "its destination must be None, a writable C-contiguous host buffer or a "
                         "device array (__cuda_array_interface__), got " +
                             python_type_name(value));
  }
  dest.data = view.len > 0 ? view.buf : nullptr;
  dest.nbytes = static_cast<size_t>(view.len);
  dest.on_host = true;
  PyBuffer_Release(&view);
  return dest;
}

nb::object to_numpy(OutputBuffer&& output) {
  if (output.is_none) {
    return nb::none();
  }
  const Dtype* entry = numpy_carrier(find_dtype(output.dtype));
  if (output.in_destination) {
    size_t nbytes = entry->bits / 8;
    nb::object shape = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(output.shape.size())));
    for (size_t d = 0; d < output.shape.size(); ++d) {
      nbytes *= output.shape[d];
      PyTuple_SET_ITEM(shape.ptr(), static_cast<Py_ssize_t>(d), PyLong_FromSize_t(output.shape[d]));
    }
    return nb::cast(
        WrittenOutput{nb::borrow<nb::tuple>(shape), nb::borrow(numpy_dtype(entry)), nbytes});
  }
  if (auto copied = copy_into_numpy(output, entry)) {
    return std::move(*copied);
  }
  nb::dlpack::dtype dtype{static_cast<uint8_t>(entry->code), entry->bits, 1};
  uint8_t* data = output.data.release();
  nb::capsule owner(data, [](void* p) noexcept { std::free(p); });
  nb::ndarray<nb::numpy> array(data, output.shape.size(), output.shape.data(), owner, nullptr,
                               dtype);
  return array.cast();
}

}  // namespace ethost
