#include "backend_loader.h"

#include <executorch/runtime/backend/interface.h>

#include <dlfcn.h>

#include <algorithm>

namespace ethost {

std::vector<std::string> registered_backends() {
  std::vector<std::string> names;
  for (size_t i = 0; i < executorch::runtime::get_num_registered_backends(); ++i) {
    auto name = executorch::runtime::get_backend_name(i);
    if (name.ok()) {
      names.emplace_back(name.get());
    }
  }
  return names;
}

Outcome<std::vector<std::string>> load_backend_library(const std::string& path) {
  std::vector<std::string> before = registered_backends();
  // RTLD_GLOBAL: the backend's symbols must resolve against the single libexecutorch.so already
  // mapped here, so it registers into the registry this host reads. The handle is never
  // closed: a registered backend must outlive every program using it.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* reason = ::dlerror();
    return Status(Error::AccessFailed, reason != nullptr ? reason : "dlopen failed");
  }
  std::vector<std::string> added;
  for (const auto& name : registered_backends()) {
    if (std::find(before.begin(), before.end(), name) == before.end()) {
      added.push_back(name);
    }
  }
  return added;
}

}  // namespace ethost
