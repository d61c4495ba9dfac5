// Python face of the TensorRTBackend library: configuration for the service (engine provider,
// counters, the blob parser its ingest reuses). Test hooks are a separate, test-only module
// (ethost_tensorrt_testing, testing_module.cpp), reachable as `ethost_tensorrt.testing` where a
// test build installed it.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <executorch/runtime/platform/runtime.h>

#include "backend.h"
#include "blob.h"
#include "counters_module.h"
#include "engine_runner.h"
#include "load_options.h"
#include "scratch.h"
#include "memory.h"
#include "provider_module.h"

namespace nb = nanobind;
using namespace ethost_trt;

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
  d["engine_key"] =
      b.metadata.engine_key ? nb::object(nb::str(b.metadata.engine_key->c_str())) : nb::none();
  return d;
}

// A ValueError whose message is the reason, carrying the fault and binding as attributes.
[[noreturn]] void raise_refusal(const std::string& reason, const BlobRefusal& why) {
  nb::object error = nb::handle(PyExc_ValueError)(nb::str(reason.c_str()));
  error.attr("fault") = nb::str(blob_fault_name(why.fault));
  error.attr("binding") =
      why.binding.empty() ? nb::object(nb::none()) : nb::object(nb::str(why.binding.c_str()));
  PyErr_SetObject(PyExc_ValueError, error.ptr());
  throw nb::python_error();
}

}  // namespace

// The test hooks, imported on first use of `ethost_tensorrt.testing` (PEP 562 module
// __getattr__), so production never loads them and a build without them says how to get them.
nb::object module_getattr(nb::module_ m, const std::string& name) {
  if (name == "testing") {
    nb::object testing;
    try {
      testing = nb::module_::import_("ethost_tensorrt_testing");
    } catch (nb::python_error& e) {
      if (!e.matches(PyExc_ImportError)) throw;
      throw nb::attribute_error(
          "ethost_tensorrt.testing: the test hooks (ethost_tensorrt_testing) are not installed; "
          "build with ETHOST_TESTING=ON (pip install -C cmake.define.ETHOST_TESTING=ON ..., or "
          "bash .ci/install --test)");
    }
    m.attr("testing") = testing;
    return testing;
  }
  throw nb::attribute_error(("module 'ethost_tensorrt' has no attribute '" + name + "'").c_str());
}

NB_MODULE(ethost_tensorrt, m) {
  executorch::runtime::runtime_init();
  m.doc() = "TensorRTBackend delegate for ExecuTorch programs (registered when this library loads)";

  m.def(
      "registration_error",
      []() -> std::optional<std::string> {
        const char* e = registration_error();
        return e ? std::optional<std::string>(e) : std::nullopt;
      },
      "None when this library holds the TensorRTBackend id, else why it does not.");

  m.def(
      "parse_blob",
      [](nb::bytes blob) {
        BlobRefusal why;
        auto parsed = parse_blob(static_cast<const uint8_t*>(blob.data()), blob.size(), &why);
        if (!parsed.ok()) raise_refusal(parsed.status().reason, why);
        return blob_dict(parsed.value());
      },
      nb::arg("blob"),
      "The delegate's own reading of a Torch-TensorRT blob; ValueError says why it is refused, "
      "its `fault` which rule it breaks (one of blob_faults()) and its `binding` which binding "
      "(None when none).");

  m.def(
      "blob_faults",
      []() {
        std::vector<std::string> names;
        for (BlobFault f : all_blob_faults()) names.emplace_back(blob_fault_name(f));
        return names;
      },
      "Every fault parse_blob may name: the service maps each to a rule of its catalogue.");

  m.def("set_engine_provider", &set_python_provider, nb::arg("provider").none(),
        "Install the object TensorRT is reached through (deserialize, describe, create_context, "
        "infer_shapes, execute; the service's TensorRTEngineProvider is the shipped one).");
  m.def("engine_provider", &python_provider);
  m.def("provider_gil_entries", &provider_gil_entries,
        "How many times delegates have taken the GIL to call the engine provider (at most once "
        "per execute).");

  m.def(
      "device_status",
      []() -> std::optional<std::string> {
        auto memory = active_memory();
        return memory.ok() ? std::nullopt : std::optional<std::string>(memory.status().reason);
      },
      "None when delegates can initialize here, else why not (e.g. 'no CUDA device: ...').");

  m.def("memory_kind", []() -> std::optional<std::string> {
    auto memory = active_memory();
    return memory.ok() ? std::optional<std::string>(memory.value()->kind()) : std::nullopt;
  });

  m.def(
      "staging_counters",
      []() {
        nb::list out;
        for (const auto& runner : all_runner_counters()) {
          nb::dict d;
          d["delegate"] = runner.label;
          d["owner"] = runner.origin.owner;
          d["method"] = runner.origin.method;
          d["ordinal"] = runner.origin.ordinal;
          d["bindings"] = counters_list(runner.bindings);
          out.append(d);
        }
        return out;
      },
      "Per live delegate instance: its label, owner (see set_instance_owner), method and ordinal "
      "among its method instance's TensorRT delegates; per binding, staging copies so far and how "
      "often it was staged or bound directly.");

  m.def(
      "set_load_options",
      [](std::optional<int64_t> budget_bytes, std::optional<double> budget_fraction,
         std::optional<bool> use_cuda_graphs, std::optional<bool> use_shared_engines,
         std::optional<bool> use_shared_activation_scratch) {
        LoadOptions options;
        if (budget_bytes) options.weight_streaming_budget = WeightBudget{budget_bytes, {}};
        if (budget_fraction) options.weight_streaming_budget = WeightBudget{{}, budget_fraction};
        options.use_cuda_graphs = use_cuda_graphs;
        options.use_shared_engines = use_shared_engines;
        options.use_shared_activation_scratch = use_shared_activation_scratch;
        set_thread_load_options(options);
      },
      nb::arg("weight_streaming_budget_bytes").none() = nb::none(),
      nb::arg("weight_streaming_budget_fraction").none() = nb::none(),
      nb::arg("use_cuda_graphs").none() = nb::none(),
      nb::arg("use_shared_engines").none() = nb::none(),
      nb::arg("use_shared_activation_scratch").none() = nb::none(),
      "The knobs of the delegates this thread initializes from now on (None: what the program "
      "baked in, else the default); they override the program's compile specs. Call with no "
      "arguments to reset.");

  m.def(
      "engine_reports",
      []() {
        nb::list out;
        for (const auto& r : all_runner_reports()) {
          nb::dict d;
          d["delegate"] = r.label;
          d["owner"] = r.origin.owner;
          d["method"] = r.origin.method;
          d["ordinal"] = r.origin.ordinal;
          d["engine_id"] = r.engine_id;
          d["shared_engines"] = r.shared_engines;
          d["shared_scratch"] = r.shared_scratch;
          d["engine_holders"] = r.engine_holders;
          d["device_memory_size"] = r.stats.device_memory_size;
          d["total_weights_size"] = r.stats.total_weights_size;
          d["streamable_weights_size"] = r.stats.streamable_weights_size;
          d["weight_streaming_budget"] = r.stats.weight_streaming_budget;
          d["resident_weights_size"] = r.stats.resident_weights();
          d["plan_sha256"] = r.stats.plan_sha256;
          d["budget_key"] = r.stats.budget_key;
          nb::dict g;
          g["requested"] = r.graphs.requested;
          g["replaying"] = r.graphs.replaying;
          g["reason"] = r.graphs.reason;
          g["captures"] = r.graphs.captures;
          g["failed_captures"] = r.graphs.failed_captures;
          g["replays"] = r.graphs.replays;
          d["cuda_graphs"] = g;
          out.append(d);
        }
        return out;
      },
      "Per live delegate instance: its engine (engine_id is shared by instances sharing one "
      "engine), its device figures, its knobs and whether it replays CUDA graphs (and why not).");

  m.def(
      "shared_scratch_bytes",
      []() -> size_t {
        auto memory = active_memory();
        return memory.ok() ? shared_scratch_bytes(memory.value().get()) : 0;
      },
      "Bytes of the shared activation scratch on the active device now (0: none).");

  m.def(
      "device_memory_info",
      []() -> std::optional<std::tuple<size_t, size_t>> {
        auto memory = active_memory();
        if (!memory.ok()) return std::nullopt;
        size_t free_bytes = 0, total_bytes = 0;
        if (!memory.value()->memory_info(&free_bytes, &total_bytes).ok()) return std::nullopt;
        return std::make_tuple(free_bytes, total_bytes);
      },
      "(free, total) bytes of the device delegates load on (cudaMemGetInfo); None where "
      "unknown.");

  m.def("set_instance_owner", &set_instance_owner, nb::arg("owner"),
        "Names the delegate instances this thread creates from now on (staging_counters' "
        "'owner'); the server sets the model's name while it loads the model's instances.");

  m.def("__getattr__", [m](const std::string& name) { return module_getattr(m, name); });
}

// Visible on purpose: lets a test ask a second copy of this module, loaded with dlopen beside the
// first, what its own registration found, without importing it as a Python module. Defined here,
// not in backend.cpp: --exclude-libs hides whatever comes from a static archive.
extern "C" __attribute__((visibility("default"))) const char* ethost_tensorrt_registration_error() {
  return ethost_trt::registration_error();
}
