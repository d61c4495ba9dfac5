// The Python engine provider (the service's TensorRTEngineProvider, or the test
// engine provider) behind the delegate's EngineProvider seam (engine_provider.h).
#pragma once

#include <cstdint>

#include <nanobind/nanobind.h>

namespace ethost_trt {

// Replaces the provider for engines deserialized from now on; engines already shared keep the
// provider that made them. None uninstalls it.
void set_python_provider(nanobind::object provider);
nanobind::object python_provider();
// How often the delegate has taken the GIL to call the provider, process-wide (at most once per
// execute; benchmarks and tests read it).
uint64_t provider_gil_entries();

}  // namespace ethost_trt
