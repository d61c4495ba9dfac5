// Errors as values inside the host: every fallible step returns an Outcome, and only the Python
// bindings turn a HostError into an exception. ExecuTorch itself never sees a C++ exception.
#pragma once

#include <executorch/runtime/core/error.h>

#include <cstddef>
#include <string>
#include <utility>
#include <variant>

namespace ethost {

struct HostError {
  enum class Kind {
    ExecuTorch,  // an ExecuTorch Error code (ExecuTorchError in Python)
    OsError,     // errno from opening a file (FileNotFoundError, IsADirectoryError, ...)
    Input,       // caller's input does not fit the method (InputError)
    Busy,        // instance already executing on another thread (InstanceBusy)
  };
  Kind kind = Kind::ExecuTorch;
  executorch::runtime::Error code = executorch::runtime::Error::Internal;
  int os_errno = 0;
  std::string action;   // e.g. "loading method 'forward' of"
  std::string path;     // file involved; empty when none
  std::string context;  // detail: ExecuTorch's last error log line, or our own reason
  size_t input_index = 0;
  bool has_input_index = false;  // false when the whole input list is wrong (count)
  std::string input_name;

  static HostError executorch(executorch::runtime::Error code, std::string action,
                              std::string path, std::string context) {
    HostError e;
    e.code = code;
    e.action = std::move(action);
    e.path = std::move(path);
    e.context = std::move(context);
    return e;
  }
  static HostError os(int err, std::string path, std::string context) {
    HostError e;
    e.kind = Kind::OsError;
    e.os_errno = err;
    e.path = std::move(path);
    e.context = std::move(context);
    return e;
  }
  static HostError input(size_t index, std::string name, std::string message) {
    HostError e;
    e.kind = Kind::Input;
    e.input_index = index;
    e.has_input_index = true;
    e.input_name = std::move(name);
    e.context = std::move(message);
    return e;
  }
  static HostError input_count(size_t expected, size_t got) {
    HostError e;
    e.kind = Kind::Input;
    e.input_name = "inputs";
    e.context = "expected " + std::to_string(expected) + " inputs, got " + std::to_string(got);
    return e;
  }
  static HostError busy(std::string method) {
    HostError e;
    e.kind = Kind::Busy;
    e.context = "method '" + method + "' is already executing on this instance; use one instance per thread";
    return e;
  }
};

template <typename T>
class Outcome {
 public:
  Outcome(T value) : v_(std::move(value)) {}
  Outcome(HostError error) : v_(std::move(error)) {}
  bool ok() const { return v_.index() == 0; }
  T& value() { return std::get<0>(v_); }
  T&& take() { return std::move(std::get<0>(v_)); }
  const HostError& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, HostError> v_;
};

}  // namespace ethost
