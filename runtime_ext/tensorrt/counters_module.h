// Staging counters as Python dicts, for ethost_tensorrt.staging_counters() and the test Runner.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <vector>

#include "engine_runner.h"

namespace ethost_trt {

inline nanobind::list counters_list(const std::vector<BindingCounters>& counters) {
  nanobind::list out;
  for (const auto& c : counters) {
    nanobind::dict d;
    d["name"] = c.name;
    d["is_input"] = c.is_input;
    d["staging_copies"] = c.staging_copies;
    d["misaligned_copies"] = c.misaligned_copies;
    d["staged_calls"] = c.staged_calls;
    d["direct_calls"] = c.direct_calls;
    d["stage_address"] = c.stage_address;
    d["stage_capacity"] = c.stage_capacity;
    out.append(d);
  }
  return out;
}

}  // namespace ethost_trt
