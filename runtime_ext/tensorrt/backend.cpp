#include "backend.h"

#include <atomic>
#include <cstdio>
#include <optional>

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/platform/log.h>

#include "delegate_init.h"
#include "dtypes.h"

namespace ethost_trt {

namespace et = executorch::runtime;

namespace {

std::atomic<uint64_t> g_instances{0};

// The creating thread's owner name, and which method instance it is initializing delegates of
// (told apart by the instance's own method allocator) with how many TensorRT delegates so far.
thread_local std::string t_owner;
thread_local const void* t_instance = nullptr;
thread_local size_t t_ordinal = 0;

RunnerOrigin next_origin(et::BackendInitContext& context, const char* method) {
  const void* instance = context.get_runtime_allocator();
  if (instance != t_instance) {
    t_instance = instance;
    t_ordinal = 0;
  }
  return RunnerOrigin{t_owner, method, t_ordinal++};
}

class TensorRTBackend final : public et::BackendInterface {
 public:
  bool is_available() const override { return active_memory().ok(); }

  et::Result<et::DelegateHandle*> init(et::BackendInitContext& context,
                                       et::FreeableBuffer* processed,
                                       et::ArrayRef<et::CompileSpec> specs) const override {
    const char* method = context.get_method_name() ? context.get_method_name() : "?";
    std::string label = std::string(method) + "#" + std::to_string(g_instances++);
    RunnerOrigin origin = next_origin(context, method);
    try {
      const et::NamedDataMap* map = context.get_named_data_map();
      std::optional<et::FreeableBuffer> external;
      NamedLookup lookup = [&](const std::string& key) -> Outcome<Bytes> {
        if (map == nullptr) return Status(Error::NotFound, "no named data");
        auto got = map->get_data(key);
        if (!got.ok()) {
          return Status(got.error() == Error::NotFound ? Error::InvalidExternalData : got.error(),
                        "no entry '" + key + "'");
        }
        external.emplace(std::move(got.get()));
        return Bytes{static_cast<const uint8_t*>(external->data()), external->size()};
      };
      auto release = [&] {
        if (external) external->Free();
        processed->Free();
      };
      CompileSpecReader baked;
      for (const auto& spec : specs) {
        Status read =
            baked.add(spec.key, static_cast<const uint8_t*>(spec.value.buffer), spec.value.nbytes);
        if (!read.ok()) {
          ET_LOG(Error, "TensorRTBackend %s: init failed: %s", label.c_str(),
                 read.message().c_str());
          processed->Free();
          return read.code;
        }
      }
      auto runner = make_runner(static_cast<const uint8_t*>(processed->data()), processed->size(),
                                lookup, label, release, baked.options());
      if (!runner.ok()) {
        ET_LOG(Error, "TensorRTBackend %s: init failed: %s", label.c_str(),
               runner.status().message().c_str());
        return runner.status().code;
      }
      std::unique_ptr<EngineRunner> created = runner.take();
      created->set_origin(std::move(origin));
      return static_cast<et::DelegateHandle*>(created.release());
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
          ET_LOG(Error, "TensorRTBackend %s: argument %zu is not a tensor", runner->label().c_str(),
                 i);
          return Error::InvalidArgument;
        }
        const auto& t = args[i]->toTensor();
        io[i].data = t.mutable_data_ptr();
        io[i].nbytes = t.nbytes();
        io[i].shape.assign(t.sizes().begin(), t.sizes().end());
        const ethost::Dtype* dtype = ethost::find_dtype(t.scalar_type());
        io[i].dtype = dtype != nullptr ? dtype->name : "";
      }
      ResizeOutput resize = [&](size_t index, const Dims& shape, IoArg* arg) {
        auto& t = args[index]->toTensor();
        std::vector<executorch::aten::SizesType> sizes(shape.begin(), shape.end());
        Error err = et::resize_tensor(t, {sizes.data(), sizes.size()});
        if (err != Error::Ok) {
          return Status(err, "output " + std::to_string(index) +
                                 " cannot take the engine's shape (beyond its planned bound?)");
        }
        arg->data = t.mutable_data_ptr();
        arg->nbytes = t.nbytes();
        arg->shape = shape;
        return Status();
      };
      Status ran = runner->run(io, resize);
      if (!ran.ok()) {
        ET_LOG(Error, "TensorRTBackend %s: execute failed: %s", runner->label().c_str(),
               ran.message().c_str());
      }
      return ran.code;
    } catch (const std::exception& e) {
      ET_LOG(Error, "TensorRTBackend %s: execute failed: %s", runner->label().c_str(), e.what());
      return Error::Internal;
    } catch (...) {
      ET_LOG(Error, "TensorRTBackend %s: execute failed: unknown exception",
             runner->label().c_str());
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
  return "TensorRTBackend could not be registered (" + Status(err, "").message() +
         "): another library loaded into this process already holds that backend id, so "
         "programs would not run on this library's delegate";
}

const std::string g_registration = register_now();

}  // namespace

void set_instance_owner(std::string owner) {
  t_owner = std::move(owner);
  t_instance = nullptr;
}

const char* registration_error() {
  return g_registration.empty() ? nullptr : g_registration.c_str();
}

}  // namespace ethost_trt
