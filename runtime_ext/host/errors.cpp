#include "errors.h"

#include <executorch/runtime/platform/platform.h>
#include <nanobind/stl/string.h>

#include <cstdio>
#include <cstring>

namespace nb = nanobind;
using executorch::runtime::Error;

namespace ethost {
namespace {

thread_local std::string t_last_error;
// Some failures (e.g. a key missing from the data files) are only logged at Info level.
thread_local std::string t_last_info;
pal_emit_log_message_method g_forward_log = nullptr;

// A failure is often logged as a chain (a kernel's reason, then the runtime's "arg 2 with
// type id 1"): the first lines carry the cause, so every error line since the last clear is
// kept, up to a bound.
constexpr size_t kMaxErrorText = 2000;

void capture_log(et_timestamp_t timestamp, et_pal_log_level_t level, const char* filename,
                 const char* function, size_t line, const char* message, size_t length) {
  std::string text(message, length);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
    text.pop_back();
  }
  if (level == kError || level == kFatal) {
    if (t_last_error.size() < kMaxErrorText) {
      t_last_error += (t_last_error.empty() ? "" : "; ") + text;
    }
  } else {
    t_last_info = std::move(text);
  }
  if (g_forward_log != nullptr) {
    g_forward_log(timestamp, level, filename, function, line, message, length);
  }
}

PyObject* g_executorch_error = nullptr;
PyObject* g_input_error = nullptr;
PyObject* g_instance_busy = nullptr;

PyObject* new_exception(nb::module_& m, const char* name, PyObject* base, const char* doc) {
  std::string qualified = std::string("ethost.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
  if (type == nullptr) {
    throw nb::python_error();
  }
  m.attr(name) = nb::handle(type);
  return type;
}

[[noreturn]] void raise_instance(PyObject* type, nb::object instance) {
  PyErr_SetObject(type, instance.ptr());
  throw nb::python_error();
}

}  // namespace

std::string error_name(Error code) {
  const char* name = executorch::runtime::to_string(code);
  if (name == nullptr || std::strcmp(name, "Error::Unknown") == 0 || name[0] == '\0') {
    return "Error" + std::to_string(static_cast<unsigned>(code));
  }
  // to_string gives "Error::InvalidProgram"; users and the contract expect the bare name.
  const char* sep = std::strstr(name, "::");
  return sep != nullptr ? std::string(sep + 2) : std::string(name);
}

void install_log_capture() {
  const executorch::runtime::PalImpl* current = executorch::runtime::get_pal_impl();
  if (current != nullptr && current->emit_log_message != &capture_log) {
    g_forward_log = current->emit_log_message;
  }
  executorch::runtime::register_pal(
      executorch::runtime::PalImpl::create(&capture_log, __FILE__));
}

void clear_last_log_error() {
  t_last_error.clear();
  t_last_info.clear();
}
std::string last_log_error() { return t_last_error.empty() ? t_last_info : t_last_error; }

HostError from_executorch(Error code, std::string action, std::string path) {
  return HostError::executorch(code, std::move(action), std::move(path), last_log_error());
}

void register_exceptions(nb::module_& m) {
  g_executorch_error = new_exception(
      m, "ExecuTorchError", PyExc_RuntimeError,
      "An ExecuTorch runtime failure. Attributes: code (int), error_name (str), path (file involved "
      "or None), context (ExecuTorch's reason, when it logged one).");
  g_input_error = new_exception(
      m, "InputError", PyExc_ValueError,
      "Inputs refused before execute (count, dtype or shape). Attributes: index, input_name.");
  g_instance_busy = new_exception(
      m, "InstanceBusy", PyExc_RuntimeError,
      "A Method instance serves one thread at a time; create more with Program.instances().");
}

void raise_python(const HostError& error) {
  switch (error.kind) {
    case HostError::Kind::OsError: {
      std::string message = std::strerror(error.os_errno);
      if (!error.context.empty()) {
        message += " (" + error.context + ")";
      }
      // OSError(errno, ...) picks FileNotFoundError / IsADirectoryError / ... from errno itself.
      nb::object instance = nb::handle(PyExc_OSError)(error.os_errno, message, error.path);
      raise_instance(reinterpret_cast<PyObject*>(Py_TYPE(instance.ptr())), instance);
    }
    case HostError::Kind::Input: {
      std::string message = error.input_name + ": " + error.context;
      nb::object instance = nb::handle(g_input_error)(message);
      instance.attr("index") = error.has_input_index ? nb::cast(error.input_index) : nb::none();
      instance.attr("input_name") = error.input_name;
      raise_instance(g_input_error, instance);
    }
    case HostError::Kind::Busy: {
      nb::object instance = nb::handle(g_instance_busy)(error.context);
      raise_instance(g_instance_busy, instance);
    }
    case HostError::Kind::ExecuTorch:
      break;
  }
  char number[16];
  std::snprintf(number, sizeof(number), "0x%02x", static_cast<unsigned>(error.code));
  std::string name = error_name(error.code);
  std::string message = name + " (" + number + ")";
  if (!error.action.empty()) {
    message += " " + error.action;
  }
  if (!error.path.empty()) {
    message += " " + error.path;
  }
  if (!error.context.empty()) {
    message += ": " + error.context;
  }
  nb::object instance = nb::handle(g_executorch_error)(message);
  instance.attr("code") = static_cast<int>(error.code);
  instance.attr("error_name") = name;
  instance.attr("path") = error.path.empty() ? nb::none() : nb::cast(error.path);
  instance.attr("context") = error.context;
  raise_instance(g_executorch_error, instance);
}

}  // namespace ethost
