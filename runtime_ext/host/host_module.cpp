// Python bindings of the program host. Everything here is translation: failed Outcomes become
// exceptions, specs become dicts, and the GIL is released around every ExecuTorch call that
// can take long (file verification, method load, execute).
#include "backend_loader.h"
#include "contract_export.h"
#include "device_memory.h"
#include "errors_module.h"
#include "executorch_log.h"
#include "lane_module.h"
#include "method_instance.h"
#include "program.h"
#include "tensors_module.h"

#include <nanobind/nanobind.h>
#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <executorch/runtime/platform/runtime.h>

#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>

namespace nb = nanobind;
using namespace nb::literals;

namespace ethost {
namespace {

nb::dict tensor_spec_dict(const TensorSpec& spec) {
  nb::dict out;
  out["index"] = spec.index;
  out["tag"] = tag_name(spec.tag);
  if (spec.is_tensor) {
    out["name"] = spec.name;
    out["dtype"] = dtype_name(spec.dtype);
    out["shape"] = spec.shape;
    out["dynamic"] = spec.dynamic;
    out["memory_planned"] = spec.memory_planned;
    out["nbytes"] = spec.nbytes;
  }
  return out;
}

nb::dict method_spec_dict(const MethodSpec& spec) {
  nb::list inputs, outputs, buffers;
  for (const auto& input : spec.inputs) inputs.append(tensor_spec_dict(input));
  for (const auto& output : spec.outputs) outputs.append(tensor_spec_dict(output));
  for (const auto& buffer : spec.planned_buffers) {
    nb::dict entry;
    entry["size"] = buffer.size;
    entry["device"] = buffer.device;
    buffers.append(entry);
  }
  nb::dict out;
  out["name"] = spec.name;
  out["inputs"] = inputs;
  out["outputs"] = outputs;
  out["delegates"] = spec.delegates;
  out["planned_buffers"] = buffers;
  return out;
}

std::shared_ptr<MethodInstance> load_instance(const std::shared_ptr<LoadedProgram>& program,
                                              const std::string& name) {
  Outcome<std::unique_ptr<MethodInstance>> loaded = Status(Error::Internal, "not loaded");
  {
    nb::gil_scoped_release released;
    loaded = MethodInstance::load(program, name);
  }
  return std::shared_ptr<MethodInstance>(unwrap(std::move(loaded)));
}

// The Python-facing Program: the shared loaded program plus one cached instance per method
// (what load_method returns and what method_meta reads dynamism from).
class PyProgram {
 public:
  explicit PyProgram(std::shared_ptr<LoadedProgram> loaded) : loaded_(std::move(loaded)) {}

  const LoadedProgram& loaded() const { return *loaded_; }

  std::shared_ptr<MethodInstance> load_method(const std::string& name) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto found = primary_.find(name);
      if (found != primary_.end()) {
        return found->second;
      }
    }
    auto instance = load_instance(loaded_, name);
    std::lock_guard<std::mutex> lock(mutex_);
    // Another thread may have loaded it meanwhile; keep the first so "loads once" holds.
    return primary_.emplace(name, instance).first->second;
  }

  std::vector<std::shared_ptr<MethodInstance>> instances(const std::string& name, size_t n) {
    std::vector<std::shared_ptr<MethodInstance>> out;
    for (size_t i = 0; i < n; ++i) {
      out.push_back(load_instance(loaded_, name));
    }
    return out;
  }

 private:
  std::shared_ptr<LoadedProgram> loaded_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<MethodInstance>> primary_;
};

// Holds an instance's claim for one execute, whatever way the call leaves.
class Claim {
 public:
  // `given`: the caller holds the claim already, and gives it back itself.
  Claim(MethodInstance& instance, bool given)
      : instance_(instance), held_(given || instance.try_acquire()), owned_(!given) {}
  ~Claim() {
    if (held_ && owned_) instance_.release();
  }
  bool held() const { return held_; }

 private:
  MethodInstance& instance_;
  bool held_;
  bool owned_;
};

nb::list execute(MethodInstance& self, nb::sequence values, nb::handle destinations,
                 nb::handle gate, bool give_back_now) {
  // With a gate, the caller claimed the instance from it, and it goes back through the gate
  // (lane/method_gate.h) once the run ends, even if binding fails first.
  Claim claim(self, !gate.is_none());
  if (!claim.held()) raise_python(Status::busy(self.name()));
  struct GiveBack {
    nb::handle gate;
    const MethodInstance& instance;
    bool pending;
    void now() {
      if (!pending || gate.is_none()) return;
      pending = false;
      lane_gate_release(gate, instance);
    }
    ~GiveBack() { now(); }
  } give_back{gate, self, give_back_now};
  const auto& specs = self.spec().inputs;
  size_t count = nb::len(values);
  if (count != specs.size()) {
    raise_python(Status::input_count(specs.size(), count));
  }
  std::vector<HeldInput> keep_alive;
  keep_alive.reserve(count);
  std::vector<InputBinding> bindings;
  bindings.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    bindings.push_back(unwrap(bind_input(values[i], specs[i], keep_alive)));
  }
  // Kept alive by the caller's sequence, which the call holds, until execute returns.
  std::optional<std::vector<OutputDestination>> into;
  if (!destinations.is_none()) {
    const auto& output_specs = self.spec().outputs;
    nb::sequence given = nb::borrow<nb::sequence>(destinations);
    if (nb::len(given) != output_specs.size()) {
      raise_python(Status(Error::InvalidArgument,
                          "expected " + std::to_string(output_specs.size()) +
                              " output destinations (one per output, None for none), got " +
                              std::to_string(nb::len(given))));
    }
    into.emplace();
    into->reserve(output_specs.size());
    for (size_t i = 0; i < output_specs.size(); ++i) {
      into->push_back(unwrap(bind_output_destination(given[i], output_specs[i])));
    }
  }
  Outcome<std::vector<OutputBuffer>> ran = Status(Error::Internal, "not run");
  {
    nb::gil_scoped_release released;
    ran = self.run(bindings, into ? &*into : nullptr);
  }
  give_back.now();  // before the outputs are converted: a request may be waiting for it
  std::vector<OutputBuffer> outputs = unwrap(std::move(ran));
  nb::list result;
  for (auto& output : outputs) {
    result.append(to_numpy(std::move(output)));
  }
  return result;
}

std::vector<std::string> load_backend_library_py(const std::filesystem::path& path) {
  Outcome<std::vector<std::string>> loaded = Status(Error::Internal, "not loaded");
  {
    nb::gil_scoped_release released;
    loaded = load_backend_library(path.string());
  }
  if (!loaded.ok()) {
    nb::object instance = nb::handle(PyExc_OSError)("cannot load backend library " + path.string() +
                                                    ": " + loaded.status().reason);
    PyErr_SetObject(PyExc_OSError, instance.ptr());
    throw nb::python_error();
  }
  return loaded.take();
}

}  // namespace
}  // namespace ethost

NB_MODULE(ethost, m) {
  using namespace ethost;
  executorch::runtime::runtime_init();
  install_log_capture();
  register_exceptions(m);
  register_lane(m);
  export_contract_constants(m);
  m.doc() =
      "Native host for ExecuTorch programs: verified, memory-mapped programs, 256-byte aligned "
      "planned arenas, GIL-free execute, one Method instance per worker thread.";

  nb::class_<MethodInstance>(m, "Method",
                             "One executable instance of a method; use from one thread at a time.")
      .def_prop_ro("name", &MethodInstance::name)
      .def_prop_ro("meta", [](const MethodInstance& self) { return method_spec_dict(self.spec()); })
      .def("arena_addresses", &MethodInstance::arena_addresses)
      .def_prop_ro(
          "inputs_read_in_device_memory",
          [](const MethodInstance& self) {
            std::vector<bool> out;
            for (const auto& input : self.spec().inputs) {
              out.push_back(!input.memory_planned && input.read_by_device_delegates_only);
            }
            return out;
          },
          "Per input: whether one given in device memory is read where it is (not memory-"
          "planned, and only delegates of backends that take device memory read it; see "
          "accept_device_memory). Others are copied into planned or host memory first.")
      .def_prop_rw("kernel_threadpool", &MethodInstance::kernel_threadpool,
                   &MethodInstance::set_kernel_threadpool,
                   "Whether kernels may use ExecuTorch's process-wide thread pool (default True). "
                   "Set False when several instances run in parallel threads: the shared pool "
                   "runs one parallel region at a time, so they would wait on each other.")
      .def_prop_ro("last_run_ns", &MethodInstance::last_run_ns,
                   "Nanoseconds the last execute spent binding inputs, executing and copying "
                   "outputs, without the GIL (0 before the first).")
      .def(
          "execute", &execute, "inputs"_a, "outputs"_a = nb::none(), "gate"_a = nb::none(),
          "give_back"_a = true,
          "Runs the method; returns numpy copies of the outputs. Inputs are host arrays, or arrays "
          "in device memory described by __cuda_array_interface__ (see device_input_counts). "
          "`outputs`, if given, has one entry per output: None, device memory "
          "(__cuda_array_interface__, read for its address and byte size) or a writable "
          "C-contiguous host buffer (read the same way) the output is written into, returned as "
          "a WrittenOutput (see device_output_counts, which counts device memory only). "
          "Raises InputError before running when inputs do not fit, InstanceBusy if another "
          "thread is running it. With `gate` (the method's LaneGate), the caller claimed this "
          "instance from the gate, and it goes back through the gate once the run ends, unless "
          "`give_back` is False (the caller then gives it back with gate.release).");

  nb::class_<WrittenOutput>(m, "WrittenOutput",
                            "An output written into the memory given for it: no bytes, "
                            "its shape, numpy dtype and byte count.")
      .def_ro("shape", &WrittenOutput::shape)
      .def_ro("dtype", &WrittenOutput::dtype)
      .def_ro("nbytes", &WrittenOutput::nbytes)
      .def("__repr__", [](const WrittenOutput& self) {
        return "WrittenOutput(shape=" + nb::cast<std::string>(nb::repr(self.shape)) +
               ", dtype=" + nb::cast<std::string>(nb::str(self.dtype)) + ")";
      });

  nb::class_<PyProgram>(m, "Program")
      .def(
          "__init__",
          [](PyProgram* self, const std::filesystem::path& pte,
             const std::vector<std::filesystem::path>& data_paths) {
            std::vector<std::string> data;
            for (const auto& path : data_paths) data.push_back(path.string());
            Outcome<std::shared_ptr<LoadedProgram>> opened = Status(Error::Internal, "not opened");
            {
              nb::gil_scoped_release released;
              opened = LoadedProgram::open(pte.string(), data);
            }
            new (self) PyProgram(unwrap(std::move(opened)));
          },
          "pte_path"_a, "data_paths"_a = std::vector<std::filesystem::path>{})
      .def_prop_ro("path", [](const PyProgram& self) { return self.loaded().path(); })
      .def_prop_ro("data_paths", [](const PyProgram& self) { return self.loaded().data_paths(); })
      .def_prop_ro("method_names",
                   [](const PyProgram& self) { return self.loaded().method_names(); })
      .def(
          "method_meta",
          [](PyProgram& self, const std::string& name) {
            return method_spec_dict(self.load_method(name)->spec());
          },
          "name"_a, "Signature of a method; loads it (once) because dynamism is only known then.")
      .def("load_method", &PyProgram::load_method, "name"_a)
      .def("instances", &PyProgram::instances, "name"_a, "n"_a,
           "n independent instances sharing this program's mapped files.")
      .def(
          "mark_suspect",
          [](PyProgram& self, int clean_executes) {
            ExecuteRegistry::process().mark_suspect(self.loaded().executes(), clean_executes);
          },
          "clean_executes"_a,
          "Makes it a suspect of a GPU fault (one seen while it and others were executing): "
          "each of its executes runs alone on the device, so a fault during one is its own, "
          "until `clean_executes` of them succeed.")
      .def_prop_ro(
          "suspect", [](const PyProgram& self) { return self.loaded().executes().suspect(); },
          "Whether its executes still run alone on the device (see mark_suspect).");

  m.def(
      "pin_host_memory",
      [](uintptr_t address, size_t nbytes) {
        auto memory = ethost_device::active_memory();
        if (!memory.ok()) return false;  // no CUDA here: nothing to pin for
        Status pinned;
        {
          nb::gil_scoped_release released;
          pinned = memory.value()->pin_host(reinterpret_cast<void*>(address), nbytes);
        }
        if (pinned.code == Error::NotSupported) return false;
        if (!pinned.ok()) throw std::runtime_error(pinned.reason);
        return true;
      },
      "address"_a, "nbytes"_a,
      "Page-locks host memory for the GPU (cudaHostRegister) so that copies to and from it run "
      "at full speed; False where that gains nothing (no CUDA, a GPU reading pageable memory).");
  m.def(
      "unpin_host_memory",
      [](uintptr_t address) {
        auto memory = ethost_device::active_memory();
        if (!memory.ok()) return;
        Status unpinned = memory.value()->unpin_host(reinterpret_cast<void*>(address));
        if (!unpinned.ok()) throw std::runtime_error(unpinned.reason);
      },
      "address"_a);
  m.def(
      "device_fault",
      []() -> std::optional<std::string> {
        auto memory = ethost_device::active_memory();
        if (!memory.ok()) return std::nullopt;  // no device here: no context to poison
        Status health;
        {
          nb::gil_scoped_release released;  // it waits for the device's work in flight
          health = memory.value()->context_health();
        }
        if (health.ok()) return std::nullopt;
        return health.reason;
      },
      "Why the device context is poisoned (a sticky error: every later call fails, only a new "
      "process recovers), or None while it works or where there is no device. Asked after an "
      "execute or a load failed (DeviceMemory::context_health, the one definition).");
  m.def(
      "sticky_fault",
      []() -> std::optional<std::pair<std::string, std::vector<std::string>>> {
        std::optional<StickyFault> fault;
        {
          nb::gil_scoped_release released;  // it may wait for the device's work in flight
          fault = ExecuteRegistry::process().fault([] {
            auto memory = ethost_device::active_memory();
            return memory.ok() ? memory.value()->context_health() : Status();
          });
        }
        if (!fault) return std::nullopt;
        return std::make_pair(fault->reason, fault->candidates);
      },
      "The sticky GPU fault of this process as (the runtime's words, the paths of the programs "
      "with an execute in flight when it was first seen: the candidates for the blame), or None "
      "while the context works. Recorded by the first failed execute after which the context "
      "no longer works (execute_registry.h); asked after an execute or a load failed.");
  m.def(
      "device_input_counts",
      [] {
        DeviceInputCounts counts = device_input_counts();
        nb::dict out;
        out["bound"] = counts.bound;
        out["device_to_device"] = counts.device_to_device;
        out["to_host"] = counts.to_host;
        return out;
      },
      "Inputs given in device memory (__cuda_array_interface__) since the process started, by "
      "where they went: bound (not memory-planned: the method read them in place), "
      "device_to_device or to_host (copied into a buffer planned in device or host memory).");
  m.def(
      "pinned_host_buffers",
      [] {
        PinnedCounts counts = pinned_counts();
        nb::dict out;
        out["pinned"] = counts.pinned;
        out["refused"] = counts.refused;
        out["locked_bytes"] = counts.locked_bytes;
        return out;
      },
      "Host buffers (planned ones, and instances' own for tensors left out of planning) "
      "page-locked for copies to and from device memory since the process started (pinned), "
      "those the driver refused (left pageable), and the bytes locked now (arenas.h).");
  m.def(
      "device_output_counts",
      [] {
        DeviceOutputCounts counts = device_output_counts();
        nb::dict out;
        out["bound"] = counts.bound;
        out["device_to_device"] = counts.device_to_device;
        out["from_host"] = counts.from_host;
        return out;
      },
      "Outputs written into device memory given for them (execute's `outputs`) since the "
      "process started, by how: bound (not memory-planned, written there by a device delegate), "
      "device_to_device or from_host (copied there from a buffer planned in device or host "
      "memory, or the instance's host buffer).");
  m.def("accept_device_memory", &accept_device_memory, "backend_id"_a,
        "Declares that delegates of this backend take device memory for their arguments, so an "
        "input in device memory that only they read is handed to the method as it is. Call it "
        "before opening programs (methods decide when loaded).");
  m.def("registered_backends", &registered_backends);
  m.def("load_backend_library", &load_backend_library_py, "path"_a);
  m.def(
      "data_file_keys",
      [](const std::filesystem::path& path) { return unwrap(data_file_keys(path.string())); },
      "ptd_path"_a);
}
