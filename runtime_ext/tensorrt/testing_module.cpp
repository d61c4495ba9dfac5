// ethost_tensorrt_testing (reached as ethost_tensorrt.testing): lets CPU tests (and the H200
// rerun) drive the delegate's real runner and staging code without ExecuTorch, on whichever
// device memory is active, and read or write that memory the way the test engine provider must.
// A test-only module: built and installed only with ETHOST_TESTING=ON.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <executorch/runtime/platform/runtime.h>

#include <atomic>
#include <optional>

#include "counters_module.h"
#include "delegate_init.h"
#include "dtypes.h"
#include "memory.h"

namespace nb = nanobind;
using namespace ethost_trt;

namespace {

// RuntimeError("InvalidArgument (0x12): why"), the form the tests match.
void raise_if_error(const Status& status) {
  if (!status.ok()) throw std::runtime_error(status.message());
}

template <typename T>
T unwrap(Outcome<T>&& outcome) {
  raise_if_error(status_of(outcome));
  return outcome.take();
}

std::shared_ptr<DeviceMemory> memory_or_raise() {
  return unwrap(active_memory());
}

void* as_ptr(uintptr_t addr) {
  return reinterpret_cast<void*>(addr);
}

// A copy between a device address and host bytes; the direction follows where `addr` lives, so
// it also works on a host buffer bound directly on a device that reads pageable memory.
void copy_now(void* dst, const void* src, size_t n, bool device_is_dst, uintptr_t addr) {
  auto memory = memory_or_raise();
  bool on_device = memory->is_device_pointer(as_ptr(addr));
  CopyKind kind = device_is_dst ? copy_kind(false, on_device) : copy_kind(on_device, false);
  Status copied = memory->copy_async(dst, src, n, kind, 0);
  if (copied.ok()) copied = memory->synchronize(0);
  raise_if_error(copied);
}

std::atomic<uint64_t> g_runners{0};

class TestRunner {
 public:
  TestRunner(nb::bytes blob, std::optional<nb::dict> named_data) {
    NamedLookup lookup = [&](const std::string& key) -> Outcome<Bytes> {
      if (!named_data) return Status(Error::NotFound, "no named data");
      nb::str k(key.c_str());
      if (!named_data->contains(k)) return Status(Error::InvalidExternalData, "no entry");
      nb::bytes b = nb::cast<nb::bytes>((*named_data)[k]);
      return Bytes{static_cast<const uint8_t*>(b.data()), b.size()};
    };
    runner_ = unwrap(make_runner(static_cast<const uint8_t*>(blob.data()), blob.size(), lookup,
                                 "testing#" + std::to_string(g_runners++), [] {}));
  }

  // args: (address, nbytes, shape, dtype or None) per delegate argument. Returns each
  // argument's shape after the call (outputs take the shape the engine inferred).
  std::vector<std::vector<int64_t>> run(
      const std::vector<
          std::tuple<uintptr_t, size_t, std::vector<int64_t>, std::optional<std::string>>>& args) {
    std::vector<IoArg> io(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      io[i].data = as_ptr(std::get<0>(args[i]));
      io[i].nbytes = std::get<1>(args[i]);
      io[i].shape = std::get<2>(args[i]);
      io[i].dtype = std::get<3>(args[i]).value_or("");
    }
    // Outputs here are caller-owned buffers of fixed capacity, like planned memory.
    ResizeOutput resize = [](size_t, const Dims& shape, IoArg* arg) {
      size_t elems = 1;
      for (int64_t d : shape) elems *= static_cast<size_t>(d);
      const ethost::Dtype* dtype = ethost::find_dtype(arg->dtype);
      size_t need = elems * (dtype != nullptr ? dtype->size() : 1);
      if (dtype == nullptr || need > arg->nbytes) {
        return Status(Error::InvalidArgument, "output buffer of " + std::to_string(arg->nbytes) +
                                                  " bytes cannot hold the engine's output");
      }
      arg->nbytes = need;
      arg->shape = shape;
      return Status();
    };
    Status ran;
    {
      nb::gil_scoped_release release;
      ran = runner_->run(io, resize);
    }
    raise_if_error(ran);
    std::vector<std::vector<int64_t>> shapes;
    for (const auto& a : io) shapes.push_back(a.shape);
    return shapes;
  }

  nb::list counters() const { return counters_list(runner_->counters()); }
  uint64_t calls() const { return runner_->calls(); }
  uintptr_t stream() const { return runner_->stream(); }
  std::string label() const { return runner_->label(); }
  nb::dict engine_stats() const {
    const EngineStats& s = runner_->engine().stats();
    nb::dict d;
    d["stripped_weights_size"] = s.stripped_weights_size;
    d["total_weights_size"] = s.total_weights_size;
    d["refittable"] = s.refittable;
    d["device_memory_size"] = s.device_memory_size;
    return d;
  }

 private:
  std::unique_ptr<EngineRunner> runner_;
};

}  // namespace

NB_MODULE(ethost_tensorrt_testing, t) {
  executorch::runtime::runtime_init();
  t.doc() = "Test hooks of the TensorRTBackend delegate; not for production use.";
  t.def(
      "use_host_memory",
      [](bool reads_pageable_host) { use_memory(make_host_memory(reads_pageable_host)); },
      nb::arg("reads_pageable_host") = false,
      "Delegates initialized from now on use a host-memory stand-in for the GPU: a discrete one, "
      "or with reads_pageable_host=True one that reads pageable host memory (Jetson-like).");
  t.def(
      "use_cuda_memory",
      []() {
        use_memory(nullptr);
        memory_or_raise();
      },
      "Back to CUDA for delegates initialized from now on; raises when there is no CUDA device.");
  t.def(
      "poison_device",
      [](const std::string& reason) {
        raise_if_error(ethost_device::poison_host_memory(memory_or_raise(), reason));
      },
      nb::arg("reason"),
      "Leaves the host-memory stand-in as a sticky CUDA error leaves a context: every later "
      "synchronize, copy and allocation fails with `reason`, and so does ethost.device_fault().");
  t.def(
      "device_alloc",
      [](size_t n) { return reinterpret_cast<uintptr_t>(unwrap(memory_or_raise()->allocate(n))); },
      nb::arg("nbytes"));
  t.def(
      "device_free", [](uintptr_t addr) { memory_or_raise()->release(as_ptr(addr)); },
      nb::arg("address"));
  t.def(
      "device_write",
      [](uintptr_t addr, nb::bytes data) {
        copy_now(as_ptr(addr), data.data(), data.size(), true, addr);
      },
      nb::arg("address"), nb::arg("data"));
  t.def(
      "device_read",
      [](uintptr_t addr, size_t n) {
        std::string out(n, '\0');
        copy_now(out.data(), as_ptr(addr), n, false, addr);
        return nb::bytes(out.data(), out.size());
      },
      nb::arg("address"), nb::arg("nbytes"));
  t.def("is_device_pointer",
        [](uintptr_t addr) { return memory_or_raise()->is_device_pointer(as_ptr(addr)); });
  t.def(
      "stream_synchronize",
      [](uintptr_t stream) {
        auto memory = memory_or_raise();
        Status synced;
        {
          nb::gil_scoped_release release;
          synced = memory->synchronize(stream);
        }
        raise_if_error(synced);
      },
      nb::arg("stream"));

  nb::class_<TestRunner>(t, "Runner",
                         "The delegate's runner on a Torch-TensorRT blob, without ExecuTorch.")
      .def(nb::init<nb::bytes, std::optional<nb::dict>>(), nb::arg("blob"),
           nb::arg("named_data") = nb::none())
      .def("run", &TestRunner::run, nb::arg("args"))
      .def("counters", &TestRunner::counters)
      .def_prop_ro("calls", &TestRunner::calls)
      .def_prop_ro("stream", &TestRunner::stream)
      .def_prop_ro("label", &TestRunner::label)
      .def_prop_ro("engine_stats", &TestRunner::engine_stats);
}
