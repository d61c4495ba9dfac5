// Python face of the TensorRTBackend library: configuration for the service (engine provider,
// counters, the blob parser its ingest reuses) and, under `testing`, hooks that let CPU tests
// drive the delegate's real staging code through a host-memory stand-in for the GPU.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <executorch/runtime/platform/runtime.h>

#include "backend.h"
#include "blob.h"
#include "memory.h"
#include "py_engine_provider.h"

namespace nb = nanobind;
using namespace ethost_trt;

void define_testing(nb::module_& testing);

namespace {

nb::list dims(const std::vector<int64_t>& v) {
  nb::list out;
  for (int64_t d : v) out.append(d);
  return out;
}

nb::dict blob_dict(const ParsedBlob& b) {
  nb::dict d;
  d["magic"] = b.magic;
  d["metadata_offset"] = b.metadata_offset;
  d["metadata_size"] = b.metadata_size;
  d["engine_offset"] = b.engine_offset;
  d["engine_size"] = b.engine_size;
  nb::list io;
  for (const auto& x : b.metadata.io_bindings) {
    nb::dict e;
    e["name"] = x.name;
    e["is_input"] = x.is_input;
    e["dtype"] = x.dtype.empty() ? nb::object(nb::none()) : nb::object(nb::str(x.dtype.c_str()));
    e["shape"] = dims(x.shape);
    io.append(e);
  }
  d["io_bindings"] = io;
  nb::list aliased;
  for (const auto& a : b.metadata.aliased_io) {
    nb::dict e;
    e["output"] = a.output;
    e["input"] = a.input;
    e["kind"] = a.kind;
    aliased.append(e);
  }
  d["aliased_io"] = aliased;
  d["hardware_compatible"] = b.metadata.hardware_compatible;
  d["device_id"] = b.metadata.device_id;
  d["serialized_metadata_size"] = b.metadata.serialized_metadata_size;
  d["target_platform"] = b.metadata.target_platform;
  d["engine_key"] = b.metadata.engine_key ? nb::object(nb::str(b.metadata.engine_key->c_str())) : nb::none();
  return d;
}

}  // namespace

nb::list counters_list(const std::vector<BindingCounters>& counters) {
  nb::list out;
  for (const auto& c : counters) {
    nb::dict d;
    d["name"] = c.name;
    d["is_input"] = c.is_input;
    d["staging_copies"] = c.staging_copies;
    d["staged_calls"] = c.staged_calls;
    d["direct_calls"] = c.direct_calls;
    d["stage_address"] = c.stage_address;
    d["stage_capacity"] = c.stage_capacity;
    out.append(d);
  }
  return out;
}

NB_MODULE(ethost_tensorrt, m) {
  executorch::runtime::runtime_init();
  m.doc() = "TensorRTBackend delegate for ExecuTorch programs (registered when this library loads)";

  m.def("registration_error", []() -> std::optional<std::string> {
    const char* e = registration_error();
    return e ? std::optional<std::string>(e) : std::nullopt;
  }, "None when this library holds the TensorRTBackend id, else why it does not.");

  m.def("parse_blob", [](nb::bytes blob) {
    ParsedBlob parsed;
    std::string why;
    Error err = parse_blob(static_cast<const uint8_t*>(blob.data()), blob.size(), &parsed, &why);
    if (err != Error::Ok) throw nb::value_error(why.c_str());
    return blob_dict(parsed);
  }, nb::arg("blob"), "The delegate's own reading of a Torch-TensorRT blob; ValueError says why it is refused.");

  m.def("set_engine_provider", &set_python_provider, nb::arg("provider").none(),
        "Install the object TensorRT is reached through (deserialize, describe, create_context, "
        "infer_shapes, execute; see service/tensorrt_runtime.py).");
  m.def("engine_provider", &python_provider);
  m.def("provider_gil_entries", &provider_gil_entries,
        "How many times delegates have taken the GIL to call the engine provider (at most once "
        "per execute).");

  m.def("device_status", []() -> std::optional<std::string> {
    std::string why;
    auto memory = active_memory(&why);
    return memory.ok() ? std::nullopt : std::optional<std::string>(why);
  }, "None when delegates can initialize here, else why not (e.g. 'no CUDA device: ...').");

  m.def("memory_kind", []() -> std::optional<std::string> {
    std::string why;
    auto memory = active_memory(&why);
    return memory.ok() ? std::optional<std::string>(memory.get()->kind()) : std::nullopt;
  });

  m.def("staging_counters", []() {
    nb::list out;
    for (const auto& [label, counters] : all_runner_counters()) {
      nb::dict d;
      d["delegate"] = label;
      d["bindings"] = counters_list(counters);
      out.append(d);
    }
    return out;
  }, "Per live delegate instance, per binding: staging copies so far and how often it was staged or bound directly.");

  nb::module_ testing = m.def_submodule("testing", "Test hooks; not for production use.");
  define_testing(testing);
}
