// The TensorRTBackend delegate and its registration, which happens when this library is loaded.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "blob.h"
#include "engine_runner.h"

namespace ethost_trt {

// Null when this library's backend holds the id; otherwise why it does not (e.g. another
// library registered TensorRTBackend first), so the service can refuse to start.
const char* registration_error();

// Shared by the backend's init and the test Runner: the blob's engine (inline, or from `named`
// by engine_key) deserialized and bound to a fresh runner on the active device memory.
// `named_lookup` returns Error::NotFound when there is no data map at all.
using NamedLookup = std::function<Error(const std::string& key, const uint8_t** data, size_t* size)>;
Error make_runner(const uint8_t* blob, size_t blob_size, const NamedLookup& named_lookup,
                  const std::string& label, const std::function<void()>& release_bytes,
                  std::unique_ptr<EngineRunner>* out, std::string* why);

}  // namespace ethost_trt
