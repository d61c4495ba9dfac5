#include "engine_provider.h"

#include <mutex>

namespace ethost_trt {
namespace {

// Never destroyed: the last reference to a Python provider must not be dropped by a static
// destructor after the interpreter is gone.
std::mutex& g_mu = *new std::mutex();
std::shared_ptr<EngineProvider>& g_provider = *new std::shared_ptr<EngineProvider>();
std::shared_mutex& g_lifecycle = *new std::shared_mutex();

std::shared_ptr<EngineProvider> installed() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_provider;
}

}  // namespace

void set_engine_provider(std::shared_ptr<EngineProvider> provider) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_provider.swap(provider);
  }
  // The previous provider, if this was its last reference, goes here, outside the lock.
}

std::shared_lock<std::shared_mutex> engine_lifecycle_shared() {
  std::shared_lock<std::shared_mutex> lock(g_lifecycle, std::try_to_lock);
  if (lock.owns_lock()) return lock;
  std::shared_ptr<EngineProvider> provider = installed();
  if (provider) {
    provider->wait_outside([&] { lock.lock(); });
  } else {
    lock.lock();
  }
  return lock;
}

std::unique_lock<std::shared_mutex> try_engine_lifecycle_exclusive() {
  return std::unique_lock<std::shared_mutex>(g_lifecycle, std::try_to_lock);
}

Outcome<std::shared_ptr<Engine>> deserialize_engine(const uint8_t* plan, size_t size, int device_id,
                                                    const DeserializeOptions& options) {
  std::shared_ptr<EngineProvider> provider = installed();
  if (!provider) {
    return Status(Error::InvalidState,
                  "no engine provider is installed (ethost_tensorrt.set_engine_provider was not "
                  "called)");
  }
  return provider->deserialize(plan, size, device_id, options);
}

}  // namespace ethost_trt
