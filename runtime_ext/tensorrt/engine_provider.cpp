#include "engine_provider.h"

#include <mutex>

namespace ethost_trt {
namespace {

// Never destroyed: the last reference to a Python provider must not be dropped by a static
// destructor after the interpreter is gone.
std::mutex& g_mu = *new std::mutex();
std::shared_ptr<EngineProvider>& g_provider = *new std::shared_ptr<EngineProvider>();

}  // namespace

void set_engine_provider(std::shared_ptr<EngineProvider> provider) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_provider.swap(provider);
  }
  // The previous provider, if this was its last reference, goes here, outside the lock.
}

Outcome<std::shared_ptr<Engine>> deserialize_engine(const uint8_t* plan, size_t size,
                                                    int device_id) {
  std::shared_ptr<EngineProvider> provider;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    provider = g_provider;
  }
  if (!provider) {
    return Status(Error::InvalidState,
                  "no engine provider is installed (ethost_tensorrt.set_engine_provider was not "
                  "called)");
  }
  return provider->deserialize(plan, size, device_id);
}

}  // namespace ethost_trt
