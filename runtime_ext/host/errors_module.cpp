#include "errors_module.h"

#include <nanobind/stl/string.h>

#include <cstring>

namespace nb = nanobind;

namespace ethost {
namespace {

PyObject* g_executorch_error = nullptr;
PyObject* g_input_error = nullptr;
PyObject* g_instance_busy = nullptr;
PyObject* g_output_window = nullptr;

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

void register_exceptions(nb::module_& m) {
  g_executorch_error =
      new_exception(m, "ExecuTorchError", PyExc_RuntimeError,
                    "An ExecuTorch runtime failure. Attributes: code (int), error_name (str), path "
                    "(file involved "
                    "or None), context (ExecuTorch's reason, when it logged one).");
  g_input_error = new_exception(
      m, "InputError", PyExc_ValueError,
      "Inputs refused before execute (count, dtype or shape). Attributes: index, input_name.");
  g_instance_busy = new_exception(
      m, "InstanceBusy", PyExc_RuntimeError,
      "A Method instance serves one thread at a time; create more with Program.instances().");
  g_output_window = new_exception(
      m, "OutputWindowError", PyExc_ValueError,
      "An output the engine's lane ran did not go into its client's shared memory window. "
      "Attributes: index (the output's), nbytes (its bytes), shrunk_to (the region object's "
      "bytes when it shrank, else None), needed (the bytes its window needs of the object).");
}

nb::object python_error(const Status& error) {
  switch (error.kind) {
    case Status::Kind::OsError: {
      std::string message = std::strerror(error.os_errno);
      if (!error.reason.empty()) {
        message += " (" + error.reason + ")";
      }
      // OSError(errno, ...) picks FileNotFoundError / IsADirectoryError / ... from errno itself.
      return nb::handle(PyExc_OSError)(error.os_errno, message, error.path);
    }
    case Status::Kind::Input: {
      std::string message = error.input_name + ": " + error.reason;
      nb::object instance = nb::handle(g_input_error)(message);
      instance.attr("index") = error.has_input_index ? nb::cast(error.input_index) : nb::none();
      instance.attr("input_name") = error.input_name;
      return instance;
    }
    case Status::Kind::Busy: return nb::handle(g_instance_busy)(error.reason);
    case Status::Kind::OutputWindow: {
      nb::object instance = nb::handle(g_output_window)(error.reason);
      instance.attr("index") = error.output_index;
      instance.attr("nbytes") = error.output_bytes;
      instance.attr("shrunk_to") =
          error.object_bytes >= 0 ? nb::cast(error.object_bytes) : nb::none();
      instance.attr("needed") = error.object_needed;
      return instance;
    }
    case Status::Kind::Runtime: break;
  }
  nb::object instance = nb::handle(g_executorch_error)(error.message());
  instance.attr("code") = static_cast<int>(error.code);
  instance.attr("error_name") = error_name(error.code);
  instance.attr("path") = error.path.empty() ? nb::none() : nb::cast(error.path);
  instance.attr("context") = error.reason;
  return instance;
}

void raise_python(const Status& error) {
  nb::object instance = python_error(error);
  raise_instance(reinterpret_cast<PyObject*>(Py_TYPE(instance.ptr())), instance);
}

}  // namespace ethost
