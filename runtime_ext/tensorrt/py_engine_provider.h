// Installing the Python engine provider (CONTRACT "engine-provider seam") the delegate uses.
#pragma once

#include <nanobind/nanobind.h>

namespace ethost_trt {

// Replaces the provider for engines deserialized from now on; engines already shared keep the
// provider that made them. None uninstalls it.
void set_python_provider(nanobind::object provider);
nanobind::object python_provider();

}  // namespace ethost_trt
