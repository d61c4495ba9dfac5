// Where a Status becomes a Python exception: the exception types the ethost module defines and
// the one function that makes them.
#pragma once

#include "status.h"

#include <nanobind/nanobind.h>

namespace ethost {

void register_exceptions(nanobind::module_& m);
// The exception `error` stands for, not raised: the engine's lane hands Python an execute's
// failure this way, so that it reads exactly as the same failure raised by Method.execute.
nanobind::object python_error(const Status& error);
[[noreturn]] void raise_python(const Status& error);

inline void raise_if_error(const Status& status) {
  if (!status.ok()) raise_python(status);
}

template <typename T>
T unwrap(Outcome<T>&& outcome) {
  if (!outcome.ok()) raise_python(outcome.status());
  return outcome.take();
}

}  // namespace ethost
