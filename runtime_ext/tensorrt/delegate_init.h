// What a delegate instance's init does, shared by the backend and the test Runner: parse the
// blob, find its engine (inline, or in the program's named data by engine_key), deserialize it
// through the engine provider and bind it to a fresh runner on the active device memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine_runner.h"

namespace ethost_trt {

struct Bytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// The bytes stored under `key`: NotFound when the program has no data map at all,
// InvalidExternalData when the map lacks the key.
using NamedLookup = std::function<Outcome<Bytes>(const std::string& key)>;

// `release_bytes` is called once the plan is deserialized, so the blob's memory can go.
// `baked`: the knobs the program carries (its compile specs); the calling thread's load options
// (set_thread_load_options) override them.
Outcome<std::unique_ptr<EngineRunner>> make_runner(const uint8_t* blob, size_t blob_size,
                                                   const NamedLookup& named_lookup,
                                                   const std::string& label,
                                                   const std::function<void()>& release_bytes,
                                                   const LoadOptions& baked = {});

}  // namespace ethost_trt
