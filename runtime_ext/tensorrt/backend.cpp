#include "backend.h"

#include <atomic>
#include <cstdio>
#include <optional>

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/platform/log.h>

#include "dtype_names.h"

namespace ethost_trt {

namespace et = executorch::runtime;

Error make_runner(const uint8_t* blob_data, size_t blob_size, const NamedLookup& named_lookup,
                  const std::string& label, const std::function<void()>& release_bytes,
                  std::unique_ptr<EngineRunner>* out, std::string* why) {
  ParsedBlob blob;
  Error err = parse_blob(blob_data, blob_size, &blob, why);
  if (err != Error::Ok) return err;
  std::string memory_why;
  auto memory = active_memory(&memory_why);
  if (!memory.ok()) {
    *why = memory_why;
    return memory.error();
  }
  const uint8_t* plan = blob.engine;
  size_t plan_size = static_cast<size_t>(blob.engine_size);
  if (blob.metadata.engine_key) {
    const std::string& key = *blob.metadata.engine_key;
    Error found = named_lookup(key, &plan, &plan_size);
    if (found != Error::Ok) {
      *why = found == Error::NotFound
                 ? "the engine is stored under '" + key + "' but the program was loaded without its .ptd data file"
                 : "the program's data has no entry '" + key + "' (load the .ptd this program was exported with)";
      return Error::InvalidExternalData;
    }
  }
  std::shared_ptr<Engine> engine;
  ProviderError made = deserialize_engine(plan, plan_size, memory.get()->device_id(), &engine);
  release_bytes();
  if (!made.ok()) {
    *why = made.reason;
    return made.code;
  }
  return EngineRunner::create(std::move(engine), blob.metadata, memory.get(), label, out, why);
}

namespace {

std::atomic<uint64_t> g_instances{0};

class TensorRTBackend final : public et::BackendInterface {
 public:
  bool is_available() const override {
    std::string why;
    return active_memory(&why).ok();
  }

  et::Result<et::DelegateHandle*> init(et::BackendInitContext& context, et::FreeableBuffer* processed,
                                       et::ArrayRef<et::CompileSpec>) const override {
    const char* method = context.get_method_name() ? context.get_method_name() : "?";
    std::string label = std::string(method) + "#" + std::to_string(g_instances++);
    try {
      const et::NamedDataMap* map = context.get_named_data_map();
      std::optional<et::FreeableBuffer> external;
      NamedLookup lookup = [&](const std::string& key, const uint8_t** data, size_t* size) {
        if (map == nullptr) return Error::NotFound;
        auto got = map->get_data(key);
        if (!got.ok()) return got.error() == Error::NotFound ? Error::InvalidExternalData : got.error();
        external.emplace(std::move(got.get()));
        *data = static_cast<const uint8_t*>(external->data());
        *size = external->size();
        return Error::Ok;
      };
      auto release = [&] {
        if (external) external->Free();
        processed->Free();
      };
      std::unique_ptr<EngineRunner> runner;
      std::string why;
      Error err = make_runner(static_cast<const uint8_t*>(processed->data()), processed->size(),
                              lookup, label, release, &runner, &why);
      if (err != Error::Ok) {
        ET_LOG(Error, "TensorRTBackend %s: init failed (0x%x): %s", label.c_str(),
               static_cast<unsigned>(err), why.c_str());
        return err;
      }
      return static_cast<et::DelegateHandle*>(runner.release());
    } catch (const std::exception& e) {
      ET_LOG(Error, "TensorRTBackend %s: init failed: %s", label.c_str(), e.what());
      return Error::Internal;
    } catch (...) {
      // Nothing may unwind into ExecuTorch, which is built without exception handling.
      ET_LOG(Error, "TensorRTBackend %s: init failed: unknown exception", label.c_str());
      return Error::Internal;
    }
  }

  Error execute(et::BackendExecutionContext&, et::DelegateHandle* handle,
                et::Span<et::EValue*> args) const override {
    auto* runner = static_cast<EngineRunner*>(handle);
    try {
      std::vector<IoArg> io(args.size());
      for (size_t i = 0; i < args.size(); ++i) {
        if (args[i] == nullptr || !args[i]->isTensor()) {
          ET_LOG(Error, "TensorRTBackend %s: argument %zu is not a tensor", runner->label().c_str(), i);
          return Error::InvalidArgument;
        }
        const auto& t = args[i]->toTensor();
        io[i].data = t.mutable_data_ptr();
        io[i].nbytes = t.nbytes();
        io[i].shape.assign(t.sizes().begin(), t.sizes().end());
        io[i].dtype = dtype_name(t.scalar_type());
      }
      ResizeOutput resize = [&](size_t index, const std::vector<int64_t>& shape, IoArg* arg,
                                std::string* why) {
        auto& t = args[index]->toTensor();
        std::vector<executorch::aten::SizesType> sizes(shape.begin(), shape.end());
        Error err = et::resize_tensor(t, {sizes.data(), sizes.size()});
        if (err != Error::Ok) {
          *why = "output " + std::to_string(index) + " cannot take the engine's shape (beyond its planned bound?)";
          return err;
        }
        arg->data = t.mutable_data_ptr();
        arg->nbytes = t.nbytes();
        arg->shape = shape;
        return Error::Ok;
      };
      std::string why;
      Error err = runner->run(io, resize, &why);
      if (err != Error::Ok) {
        ET_LOG(Error, "TensorRTBackend %s: execute failed (0x%x): %s", runner->label().c_str(),
               static_cast<unsigned>(err), why.c_str());
      }
      return err;
    } catch (const std::exception& e) {
      ET_LOG(Error, "TensorRTBackend %s: execute failed: %s", runner->label().c_str(), e.what());
      return Error::Internal;
    } catch (...) {
      ET_LOG(Error, "TensorRTBackend %s: execute failed: unknown exception", runner->label().c_str());
      return Error::Internal;
    }
  }

  void destroy(et::DelegateHandle* handle) const override {
    delete static_cast<EngineRunner*>(handle);
  }
};

TensorRTBackend g_backend;

std::string register_now() {
  Error err = et::register_backend({"TensorRTBackend", &g_backend});
  if (err == Error::Ok) return "";
  return "TensorRTBackend could not be registered (error 0x" + [&] {
    char hex[16];
    std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned>(err));
    return std::string(hex);
  }() + "): another library loaded into this process already holds that backend id, so "
        "programs would not run on this library's delegate";
}

const std::string g_registration = register_now();

}  // namespace

const char* registration_error() {
  return g_registration.empty() ? nullptr : g_registration.c_str();
}

}  // namespace ethost_trt

// Visible on purpose: lets a test ask a second copy of this library, loaded with dlopen beside
// the first, what its own registration found, without importing it as a Python module.
extern "C" __attribute__((visibility("default"))) const char* ethost_tensorrt_registration_error() {
  return ethost_trt::registration_error();
}
