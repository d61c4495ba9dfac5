// Where ExecuTorch failures get their words: error names, the runtime's own last error log line
// (the only place it says *why*), and the Python exception types the bindings raise.
#pragma once

#include "outcome.h"

#include <nanobind/nanobind.h>

#include <string>

namespace ethost {

std::string error_name(executorch::runtime::Error code);

// ExecuTorch reports the reason for a failure only through its log; capture the last error (or,
// failing that, info) line
// per thread so exceptions can quote it. Messages are still forwarded to the default sink.
void install_log_capture();
void clear_last_log_error();
std::string last_log_error();

// Builds a HostError from an ExecuTorch Error, quoting the captured log line.
HostError from_executorch(executorch::runtime::Error code, std::string action, std::string path);

void register_exceptions(nanobind::module_& m);
[[noreturn]] void raise_python(const HostError& error);

template <typename T>
T unwrap(Outcome<T>&& outcome) {
  if (!outcome.ok()) {
    raise_python(outcome.error());
  }
  return outcome.take();
}

}  // namespace ethost
