// The one error style of the native code (host, delegate, device memory): every fallible step
// returns a Status (success, or a code with the reason in words) or an Outcome<T> (a value or
// such a Status), and callers pass failures up with ETHOST_RETURN_IF_ERROR /
// ETHOST_ASSIGN_OR_RETURN. ExecuTorch's bare Error appears only where ExecuTorch calls us or we
// call it; Python exceptions only in the *_module.cpp bindings. Nothing here throws.
#pragma once

#include <executorch/runtime/core/error.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <variant>

namespace ethost {

using executorch::runtime::Error;

// The bare name of an ExecuTorch error ("InvalidProgram"), or "Error0x.." for one it lacks.
inline std::string error_name(Error code) {
  const char* name = executorch::runtime::to_string(code);
  if (name == nullptr || name[0] == '\0' || std::strcmp(name, "Error::Unknown") == 0) {
    char number[16];
    std::snprintf(number, sizeof(number), "Error0x%02x", static_cast<unsigned>(code));
    return number;
  }
  const char* sep = std::strstr(name, "::");
  return sep != nullptr ? std::string(sep + 2) : std::string(name);
}

struct Status {
  enum class Kind {
    Runtime,  // an ExecuTorch-coded failure (ExecuTorchError in Python)
    OsError,  // errno from opening a file (FileNotFoundError, IsADirectoryError, ...)
    Input,    // the caller's input does not fit the method (InputError)
    Busy,     // the instance is executing on another thread (InstanceBusy)
    // An output the engine's lane ran could not go into its client's shared memory window
    // (OutputWindowError): the values Python words the refusal from (service/shm/binding.py).
    OutputWindow,
  };

  Kind kind = Kind::Runtime;
  Error code = Error::Ok;
  std::string reason;  // why, in words: ours, the device runtime's, or ExecuTorch's log line
  std::string action;  // what was being done, e.g. "loading method 'forward' of"
  std::string path;    // the file involved; empty when none
  int os_errno = 0;
  bool has_input_index = false;  // false when the whole input list is wrong (count)
  size_t input_index = 0;
  std::string input_name;
  size_t output_index = 0;     // OutputWindow: the output (in the method's order)
  uint64_t output_bytes = 0;   // its bytes, as the execute wrote them
  int64_t object_bytes = -1;   // >= 0: the region's object shrank to that many bytes
  uint64_t object_needed = 0;  // the bytes the region's window needs of its object

  Status() = default;
  Status(Error failure, std::string why) : code(failure), reason(std::move(why)) {}

  static Status os_error(int err, std::string file, std::string why) {
    Status s(Error::AccessFailed, std::move(why));
    s.kind = Kind::OsError;
    s.os_errno = err;
    s.path = std::move(file);
    return s;
  }
  static Status input(size_t index, std::string name, std::string why) {
    Status s(Error::InvalidArgument, std::move(why));
    s.kind = Kind::Input;
    s.has_input_index = true;
    s.input_index = index;
    s.input_name = std::move(name);
    return s;
  }
  static Status input_count(size_t expected, size_t got) {
    Status s(Error::InvalidArgument,
             "expected " + std::to_string(expected) + " inputs, got " + std::to_string(got));
    s.kind = Kind::Input;
    s.input_name = "inputs";
    return s;
  }
  // Output `index` needs `nbytes`, more than its window holds.
  static Status output_window(size_t index, uint64_t nbytes) {
    Status s(Error::InvalidArgument, "output " + std::to_string(index) + " outgrew its window");
    s.kind = Kind::OutputWindow;
    s.output_index = index;
    s.output_bytes = nbytes;
    return s;
  }
  // Output `index` fits its window, but the region's object shrank to `size` of `needed` bytes.
  static Status region_shrank(size_t index, uint64_t nbytes, uint64_t size, uint64_t needed) {
    Status s = output_window(index, nbytes);
    s.reason = "the region of output " + std::to_string(index) + " shrank";
    s.object_bytes = static_cast<int64_t>(size);
    s.object_needed = needed;
    return s;
  }
  static Status busy(const std::string& method) {
    Status s(Error::InvalidState, "method '" + method +
                                      "' is already executing on this instance; use one "
                                      "instance per thread");
    s.kind = Kind::Busy;
    return s;
  }

  bool ok() const { return code == Error::Ok; }

  // Names what was being done, and on which file, unless an inner step already did.
  Status& at(std::string what, std::string file) {
    if (action.empty()) action = std::move(what);
    if (path.empty()) path = std::move(file);
    return *this;
  }

  // "InvalidProgram (0x23) loading program /x.pte: reason"
  std::string message() const {
    char number[16];
    std::snprintf(number, sizeof(number), "0x%02x", static_cast<unsigned>(code));
    std::string out = error_name(code) + " (" + number + ")";
    if (!action.empty()) out += " " + action;
    if (!path.empty()) out += " " + path;
    if (!reason.empty()) out += ": " + reason;
    return out;
  }
};

// A value, or the Status saying why there is none.
template <typename T>
class Outcome {
 public:
  Outcome(T value) : v_(std::move(value)) {}
  Outcome(Status failure) : v_(std::move(failure)) {}
  bool ok() const { return v_.index() == 0; }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  T take() { return std::move(std::get<0>(v_)); }
  const Status& status() const { return std::get<1>(v_); }
  Status take_status() { return std::move(std::get<1>(v_)); }

 private:
  std::variant<T, Status> v_;
};

inline Status status_of(Status s) {
  return s;
}
template <typename T>
Status status_of(const Outcome<T>& o) {
  return o.ok() ? Status() : o.status();
}

}  // namespace ethost

#define ETHOST_CONCAT_INNER(a, b) a##b
#define ETHOST_CONCAT(a, b) ETHOST_CONCAT_INNER(a, b)

// Returns the Status of `expr` (a Status or an Outcome) from the enclosing function if it failed.
#define ETHOST_RETURN_IF_ERROR(expr)                               \
  do {                                                             \
    ::ethost::Status ethost_status_ = ::ethost::status_of((expr)); \
    if (!ethost_status_.ok()) return ethost_status_;               \
  } while (0)

// `lhs = value of expr` (an Outcome), or returns its Status from the enclosing function.
#define ETHOST_ASSIGN_OR_RETURN(lhs, expr) \
  ETHOST_ASSIGN_OR_RETURN_IMPL(ETHOST_CONCAT(ethost_outcome_, __LINE__), lhs, expr)
#define ETHOST_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.take_status();           \
  lhs = tmp.take()
