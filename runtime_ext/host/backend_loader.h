// Backends (e.g. TensorRTBackend) register themselves from a static initializer in their own
// shared library; loading that library is how a program's delegate becomes runnable.
#pragma once

#include <string>
#include <vector>

namespace ethost {

std::vector<std::string> registered_backends();

// dlopen with RTLD_NOW | RTLD_GLOBAL; returns the backend ids the load registered. On failure
// returns false and sets `error` to dlerror()'s text.
bool load_backend_library(const std::string& path, std::vector<std::string>& added,
                          std::string& error);

}  // namespace ethost
