// Backends (e.g. TensorRTBackend) register themselves from a static initializer in their own
// shared library; loading that library is how a program's delegate becomes runnable.
#pragma once

#include "status.h"

#include <string>
#include <vector>

namespace ethost {

std::vector<std::string> registered_backends();

// dlopen with RTLD_NOW | RTLD_GLOBAL; returns the backend ids the load registered, or a failure
// (AccessFailed) whose reason is dlerror()'s text.
Outcome<std::vector<std::string>> load_backend_library(const std::string& path);

}  // namespace ethost
