// The engine provider seam over a Python object. The host releases the GIL for the whole execute,
// so the GIL is taken only for provider calls -- once per execute: one `execute` call in the steady
// state, and `infer_shapes` + `execute` inside one entry when the input shapes are new. Every
// Python error becomes a Status here: nothing Python- or exception-shaped crosses back
// into ExecuTorch.
#include <atomic>
#include <map>
#include <stdexcept>
#include <tuple>
#include <utility>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "engine_provider.h"
#include "provider_module.h"

namespace nb = nanobind;

namespace ethost_trt {
namespace {

bool python_alive() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// Drops a reference under the GIL; at interpreter shutdown the object is leaked instead, since
// touching it then would crash.
void drop(nb::object& obj) {
  if (!obj.is_valid()) return;
  if (!python_alive()) {
    obj.release();
    return;
  }
  nb::gil_scoped_acquire gil;
  obj.reset();
}

Status failure(Error code, const char* call, nb::python_error& e) {
  std::string type = nb::cast<std::string>(nb::handle(e.type()).attr("__name__"));
  std::string value = nb::cast<std::string>(nb::str(e.value()));
  return Status(code, std::string("engine provider ") + call + " failed: " + type + ": " + value);
}

Status failure(Error code, const char* call, const std::exception& e) {
  return Status(
      code, std::string("engine provider ") + call + " returned something unexpected: " + e.what());
}

Status interpreter_gone() {
  return Status(Error::InvalidState, "the Python interpreter is shutting down");
}

// Times the delegate took the GIL to reach the provider (not counting re-entries while held).
std::atomic<uint64_t> g_gil_entries{0};

bool count_gil_entry() {
  if (!PyGILState_Check()) g_gil_entries.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// Runs `body` holding the GIL and maps any exception it raises to `code`.
template <typename F>
Status call_python(Error code, const char* call, F&& body) {
  if (!python_alive()) return interpreter_gone();
  count_gil_entry();
  nb::gil_scoped_acquire gil;
  try {
    body();
    return Status();
  } catch (nb::python_error& e) {
    return failure(code, call, e);
  } catch (const std::exception& e) {
    return failure(code, call, e);
  } catch (...) {
    return Status(code, std::string(call) + " failed with an unknown exception");
  }
}

std::optional<std::vector<int64_t>> optional_dims(nb::handle v) {
  if (v.is_none()) return std::nullopt;
  return nb::cast<std::vector<int64_t>>(v);
}

nb::object dims_list(const std::vector<Dims>& shapes) {
  nb::list out;
  for (const Dims& dims : shapes) {
    nb::list d;
    for (int64_t x : dims) d.append(x);
    out.append(d);
  }
  return out;
}

nb::object address_tuple(const std::vector<uintptr_t>& addresses) {
  nb::object out = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(addresses.size())));
  for (size_t i = 0; i < addresses.size(); ++i) {
    PyObject* v = PyLong_FromSize_t(addresses[i]);
    if (v == nullptr) throw nb::python_error();
    PyTuple_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), v);
  }
  return out;
}

class PyScope final : public ProviderScope {
 public:
  PyScope() : counted_(count_gil_entry()) {}

 private:
  bool counted_;  // before gil_: counts whether this entry takes the GIL
  nb::gil_scoped_acquire gil_;
};

class PyContext final : public ExecutionContext {
 public:
  // Bound methods are looked up once here, not per call.
  PyContext(nb::object provider, nb::object ctx)
      : infer_(provider.attr("infer_shapes")),
        execute_(provider.attr("execute")),
        provider_(std::move(provider)),
        ctx_(std::move(ctx)) {}
  ~PyContext() override {
    drop(infer_);
    drop(execute_);
    drop(ctx_);
    drop(provider_);
  }

  Outcome<std::vector<Dims>> infer_shapes(const std::vector<Dims>& inputs) override {
    std::vector<Dims> outputs;
    ETHOST_RETURN_IF_ERROR(call_python(Error::InvalidArgument, "infer_shapes", [&] {
      outputs = nb::cast<std::vector<Dims>>(infer_(ctx_, dims_list(inputs)));
    }));
    return outputs;
  }

  Status execute(const ExecuteCall& call) override {
    return call_python(Error::Internal, "execute", [&] {
      nb::object shapes = call.input_shapes ? dims_list(*call.input_shapes) : nb::none();
      nb::object addresses = call.addresses ? address_tuple(*call.addresses) : nb::none();
      if (call.scratch != 0) {
        execute_(ctx_, shapes, addresses, call.stream,
                 nb::make_tuple(call.scratch, call.scratch_size));
      } else {
        execute_(ctx_, shapes, addresses, call.stream);
      }
    });
  }

  std::unique_ptr<ProviderScope> enter() override {
    if (!python_alive()) return nullptr;
    return std::make_unique<PyScope>();
  }

 private:
  nb::object infer_;
  nb::object execute_;
  nb::object provider_;
  nb::object ctx_;
};

class PyEngine final : public Engine {
 public:
  PyEngine(nb::object provider, nb::object engine, std::vector<EngineIo> io, EngineStats stats)
      : provider_(std::move(provider)),
        engine_(std::move(engine)),
        io_(std::move(io)),
        stats_(stats) {}
  ~PyEngine() override {
    drop(engine_);
    drop(provider_);
  }

  const std::vector<EngineIo>& io() const override { return io_; }
  const EngineStats& stats() const override { return stats_; }

  Outcome<std::unique_ptr<ExecutionContext>> create_context(bool user_managed) override {
    std::unique_ptr<ExecutionContext> made;
    ETHOST_RETURN_IF_ERROR(call_python(Error::Internal, "create_context", [&] {
      nb::object ctx = user_managed ? provider_.attr("create_context")(engine_, true)
                                    : provider_.attr("create_context")(engine_);
      made = std::make_unique<PyContext>(provider_, std::move(ctx));
    }));
    return made;
  }

  bool claim_unaligned_log() override { return !unaligned_logged_.exchange(true); }

 private:
  nb::object provider_;
  nb::object engine_;
  std::vector<EngineIo> io_;
  EngineStats stats_;
  std::atomic<bool> unaligned_logged_{false};
};

void describe(nb::handle provider, nb::handle engine, std::vector<EngineIo>* io,
              EngineStats* stats) {
  nb::dict d = nb::cast<nb::dict>(provider.attr("describe")(engine));
  for (nb::handle entry : nb::cast<nb::list>(d["io"])) {
    nb::dict e = nb::cast<nb::dict>(entry);
    EngineIo t;
    t.name = nb::cast<std::string>(e["name"]);
    t.is_input = nb::cast<bool>(e["is_input"]);
    t.dtype = nb::cast<std::string>(e["dtype"]);
    t.shape = nb::cast<std::vector<int64_t>>(e["shape"]);
    if (e.contains("profile_min")) t.profile_min = optional_dims(e["profile_min"]);
    if (e.contains("profile_max")) t.profile_max = optional_dims(e["profile_max"]);
    if (e.contains("shape_tensor")) t.shape_tensor = nb::cast<bool>(e["shape_tensor"]);
    io->push_back(std::move(t));
  }
  nb::dict s = nb::cast<nb::dict>(d["stats"]);
  stats->stripped_weights_size = nb::cast<int64_t>(s["stripped_weights_size"]);
  stats->total_weights_size = nb::cast<int64_t>(s["total_weights_size"]);
  stats->refittable = nb::cast<bool>(s["refittable"]);
  stats->device_memory_size = nb::cast<int64_t>(s["device_memory_size"]);
  if (s.contains("streamable_weights_size")) {
    stats->streamable_weights_size = nb::cast<int64_t>(s["streamable_weights_size"]);
  }
  if (s.contains("weight_streaming_budget")) {
    stats->weight_streaming_budget = nb::cast<int64_t>(s["weight_streaming_budget"]);
  }
}

// Deserializes through the Python object, sharing one Engine per identical plan bytes and device
// while anyone uses it. The cache is guarded by the GIL alone: a mutex taken around GIL
// acquisition would deadlock against a Python thread that holds the GIL and wants the mutex.
class PyProvider final : public EngineProvider {
 public:
  explicit PyProvider(nb::object provider) : provider_(std::move(provider)) {}
  ~PyProvider() override { drop(provider_); }

  Outcome<std::shared_ptr<Engine>> deserialize(const uint8_t* plan, size_t size, int device_id,
                                               const DeserializeOptions& options) override {
    // A provider that releases the GIL inside deserialize may let two threads deserialize the
    // same new plan at once; both engines are valid and the later one stays in the cache.
    std::shared_ptr<Engine> out;
    ETHOST_RETURN_IF_ERROR(call_python(Error::DelegateInvalidCompatibility, "deserialize", [&] {
      nb::bytes bytes(plan, size);
      Key key;
      if (options.shared) {
        std::string digest = nb::cast<std::string>(
            nb::module_::import_("hashlib").attr("sha256")(bytes).attr("hexdigest")());
        key = Key{digest, device_id, options.budget ? options.budget->key() : ""};
        auto found = cache_.find(key);
        if (found != cache_.end()) {
          if (auto shared = found->second.lock()) {
            out = std::move(shared);
            return;
          }
        }
      }
      nb::object engine = provider_.attr("deserialize")(bytes, device_id);
      if (engine.is_none()) throw std::runtime_error("deserialize returned None");
      std::vector<EngineIo> io;
      EngineStats stats;
      describe(provider_, engine, &io, &stats);
      if (options.budget && stats.streamable_weights_size > 0) {
        // Before any context: TensorRT takes a budget only while the engine has none.
        provider_.attr("set_weight_streaming_budget")(
            engine, options.budget->resolve(stats.streamable_weights_size));
        io.clear();
        describe(provider_, engine, &io, &stats);  // context memory depends on the budget
      }
      if (options.shared) {
        stats.plan_sha256 = std::get<0>(key);
        stats.budget_key = std::get<2>(key);
      }
      auto made = std::make_shared<PyEngine>(provider_, std::move(engine), std::move(io), stats);
      if (options.shared) cache_[key] = made;
      out = std::move(made);
    }));
    return out;
  }

  void wait_outside(const std::function<void()>& wait) override {
    if (!python_alive() || !PyGILState_Check()) {
      wait();
      return;
    }
    nb::gil_scoped_release released;
    wait();
  }

 private:
  nb::object provider_;
  // Engines are shared while anyone uses them; an entry whose engine died is simply replaced.
  // Plan digest, device and budget key.
  using Key = std::tuple<std::string, int, std::string>;
  std::map<Key, std::weak_ptr<Engine>> cache_;
};

// What engine_provider() returns; guarded by the GIL. Leaked on purpose, so no static destructor
// touches Python after the interpreter is gone.
nb::object& g_installed = *new nb::object();

}  // namespace

void set_python_provider(nb::object provider) {
  if (provider.is_none()) {
    g_installed = nb::object();
    set_engine_provider(nullptr);
    return;
  }
  g_installed = provider;
  set_engine_provider(std::make_shared<PyProvider>(std::move(provider)));
}

uint64_t provider_gil_entries() {
  return g_gil_entries.load(std::memory_order_relaxed);
}

nb::object python_provider() {
  return g_installed.is_valid() ? g_installed : nb::none();
}

}  // namespace ethost_trt
