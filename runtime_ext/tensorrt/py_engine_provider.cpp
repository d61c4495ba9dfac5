// Engine provider over a Python object. The host releases the GIL for the whole execute, so the
// GIL is taken only for provider calls -- once per execute: one `execute` call in the steady
// state, and `infer_shapes` + `execute` inside one entry when the input shapes are new. Every
// Python error becomes a ProviderError here: nothing Python- or exception-shaped crosses back
// into ExecuTorch.
#include <map>
#include <atomic>
#include <stdexcept>
#include <tuple>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "engine_provider.h"
#include "py_engine_provider.h"

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

ProviderError failure(Error code, const char* call, nb::python_error& e) {
  std::string type = nb::cast<std::string>(nb::handle(e.type()).attr("__name__"));
  std::string value = nb::cast<std::string>(nb::str(e.value()));
  return {code, std::string("engine provider ") + call + " failed: " + type + ": " + value};
}

ProviderError failure(Error code, const char* call, const std::exception& e) {
  return {code, std::string("engine provider ") + call + " returned something unexpected: " + e.what()};
}

// Times the delegate took the GIL to reach the provider (not counting re-entries while held).
std::atomic<uint64_t> g_gil_entries{0};

bool count_gil_entry() {
  if (!PyGILState_Check()) g_gil_entries.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// Runs `body` holding the GIL and maps any exception it raises to `code`.
template <typename F>
ProviderError call_python(Error code, const char* call, F&& body) {
  if (!python_alive()) return {Error::InvalidState, "the Python interpreter is shutting down"};
  count_gil_entry();
  nb::gil_scoped_acquire gil;
  try {
    body();
    return {};
  } catch (nb::python_error& e) {
    return failure(code, call, e);
  } catch (const std::exception& e) {
    return failure(code, call, e);
  } catch (...) {
    return {code, std::string(call) + " failed with an unknown exception"};
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
      : infer_(provider.attr("infer_shapes")), execute_(provider.attr("execute")),
        provider_(std::move(provider)), ctx_(std::move(ctx)) {}
  ~PyContext() override {
    drop(infer_);
    drop(execute_);
    drop(ctx_);
    drop(provider_);
  }

  ProviderError infer_shapes(const std::vector<Dims>& inputs, std::vector<Dims>* outputs) override {
    return call_python(Error::InvalidArgument, "infer_shapes", [&] {
      *outputs = nb::cast<std::vector<Dims>>(infer_(ctx_, dims_list(inputs)));
    });
  }

  ProviderError execute(const ExecuteCall& call) override {
    return call_python(Error::Internal, "execute", [&] {
      nb::object shapes = call.input_shapes ? dims_list(*call.input_shapes) : nb::none();
      nb::object addresses = call.addresses ? address_tuple(*call.addresses) : nb::none();
      execute_(ctx_, shapes, addresses, call.stream);
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
      : provider_(std::move(provider)), engine_(std::move(engine)), io_(std::move(io)), stats_(stats) {}
  ~PyEngine() override {
    drop(engine_);
    drop(provider_);
  }

  const std::vector<EngineIo>& io() const override { return io_; }
  const EngineStats& stats() const override { return stats_; }

  ProviderError create_context(std::unique_ptr<ExecutionContext>* out) override {
    return call_python(Error::Internal, "create_context", [&] {
      nb::object ctx = provider_.attr("create_context")(engine_);
      *out = std::make_unique<PyContext>(provider_, std::move(ctx));
    });
  }

  bool claim_unaligned_log() override { return !unaligned_logged_.exchange(true); }

 private:
  nb::object provider_;
  nb::object engine_;
  std::vector<EngineIo> io_;
  EngineStats stats_;
  std::atomic<bool> unaligned_logged_{false};
};

// Both are guarded by the GIL alone: taking a mutex around GIL acquisition would deadlock
// against a Python thread that holds the GIL and wants the mutex. Leaked on purpose, so no static
// destructor touches Python after the interpreter is gone.
nb::object& g_provider = *new nb::object();
// Engines are shared while anyone uses them; an entry whose engine died is simply replaced.
auto& g_cache = *new std::map<std::tuple<uintptr_t, std::string, int>, std::weak_ptr<Engine>>();

void describe(nb::handle provider, nb::handle engine, std::vector<EngineIo>* io, EngineStats* stats) {
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
    io->push_back(std::move(t));
  }
  nb::dict s = nb::cast<nb::dict>(d["stats"]);
  stats->stripped_weights_size = nb::cast<int64_t>(s["stripped_weights_size"]);
  stats->total_weights_size = nb::cast<int64_t>(s["total_weights_size"]);
  stats->refittable = nb::cast<bool>(s["refittable"]);
  stats->device_memory_size = nb::cast<int64_t>(s["device_memory_size"]);
}

}  // namespace

void set_python_provider(nb::object provider) {
  g_provider = provider.is_none() ? nb::object() : std::move(provider);
}

uint64_t provider_gil_entries() { return g_gil_entries.load(std::memory_order_relaxed); }

nb::object python_provider() {
  return g_provider.is_valid() ? g_provider : nb::none();
}

ProviderError deserialize_engine(const uint8_t* plan, size_t size, int device_id,
                                 std::shared_ptr<Engine>* out) {
  // A provider that releases the GIL inside deserialize may let two threads deserialize the same
  // new plan at once; both engines are valid and the later one stays in the cache.
  if (!python_alive()) return {Error::InvalidState, "the Python interpreter is shutting down"};
  {
    nb::gil_scoped_acquire gil;
    if (!g_provider.is_valid()) {
      return {Error::InvalidState,
              "no engine provider is installed (ethost_tensorrt.set_engine_provider was not called)"};
    }
  }
  return call_python(Error::DelegateInvalidCompatibility, "deserialize", [&] {
    nb::bytes bytes(plan, size);
    std::string digest = nb::cast<std::string>(
        nb::module_::import_("hashlib").attr("sha256")(bytes).attr("hexdigest")());
    auto key = std::make_tuple(reinterpret_cast<uintptr_t>(g_provider.ptr()), digest, device_id);
    auto found = g_cache.find(key);
    if (found != g_cache.end()) {
      if (auto shared = found->second.lock()) {
        *out = std::move(shared);
        return;
      }
    }
    nb::object engine = g_provider.attr("deserialize")(bytes, device_id);
    if (engine.is_none()) throw std::runtime_error("deserialize returned None");
    std::vector<EngineIo> io;
    EngineStats stats;
    describe(g_provider, engine, &io, &stats);
    auto made = std::make_shared<PyEngine>(g_provider, std::move(engine), std::move(io), stats);
    g_cache[key] = made;
    *out = std::move(made);
  });
}

}  // namespace ethost_trt
