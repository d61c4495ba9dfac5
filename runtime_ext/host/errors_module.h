// Where a Status becomes a Python exception: the exception types the ethost module defines and
// the one function that raises them.
#pragma once

#include "status.h"

#include <nanobind/nanobind.h>

namespace ethost {

void register_exceptions(nanobind::module_& m);
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
