// TensorRTBackend as ExecuTorch sees it: found in the backend registry once the library holding
// it is loaded, initialized from a blob (its engine inline or in the program's named data, whose
// bytes it releases), executing on ExecuTorch tensors (resizing outputs to the engine's shapes),
// and refusing what it cannot run with an ExecuTorch error instead of anything thrown.
#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <executorch/runtime/backend/interface.h>
#include <executorch/runtime/core/evalue.h>
#include <executorch/runtime/core/memory_allocator.h>
#include <executorch/runtime/platform/runtime.h>

#include "backend.h"
#include "check.h"
#include "engine_runner.h"
#include "fake_engine.h"
#include "test_blobs.h"

namespace et = executorch::runtime;
using ethost_test::FakeProvider;
using ethost_test::Script;
using ethost_test::tensor;
using ethost_trt::Dims;
using ethost_trt::EngineIo;
using ethost_trt::Error;
using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::aten::TensorImpl;

namespace {

Script dynamic_batch() {
  Script s;
  EngineIo x = tensor("x", true, {-1, 4});
  x.profile_min = Dims{1, 4};
  x.profile_max = Dims{8, 4};
  s.io = {x, tensor("y", false, {-1, 4})};
  return s;
}

const char* kMeta =
    R"({"io_bindings": [{"name": "x", "is_input": true}, {"name": "y", "is_input": false}])";

void count_free(void* context, void*, size_t) {
  ++*static_cast<int*>(context);
}

// One named-data entry, whose bytes' release is counted.
class OneEntry final : public et::NamedDataMap {
 public:
  OneEntry(std::string key, std::string bytes) : key_(std::move(key)), bytes_(std::move(bytes)) {}
  et::Result<const et::TensorLayout> get_tensor_layout(std::string_view) const override {
    return Error::NotImplemented;
  }
  et::Result<et::FreeableBuffer> get_data(std::string_view key) const override {
    if (key != key_) return Error::NotFound;
    return et::FreeableBuffer(bytes_.data(), bytes_.size(), count_free, &freed);
  }
  Error load_data_into(std::string_view, void*, size_t) const override {
    return Error::NotImplemented;
  }
  et::Result<uint32_t> get_num_keys() const override { return 1; }
  et::Result<const char*> get_key(uint32_t) const override { return key_.c_str(); }
  mutable int freed = 0;

 private:
  std::string key_;
  std::string bytes_;
};

// A float32 [rows, 4] tensor over "device" memory, resizable up to [8, 4].
struct DeviceTensor {
  DeviceTensor(ethost_trt::DeviceMemory& memory, int rows, ScalarType dtype = ScalarType::Float) {
    data = memory.allocate(8 * 4 * sizeof(float)).value();
    sizes = {rows, 4};
    impl =
        std::make_unique<TensorImpl>(dtype, 2, sizes.data(), data, dim_order.data(), strides.data(),
                                     executorch::aten::TensorShapeDynamism::DYNAMIC_BOUND);
    value = et::EValue(Tensor(impl.get()));
  }
  float* floats() { return static_cast<float*>(data); }

  void* data;
  std::array<executorch::aten::SizesType, 2> sizes;
  std::array<executorch::aten::DimOrderType, 2> dim_order{0, 1};
  std::array<executorch::aten::StridesType, 2> strides{4, 1};
  std::unique_ptr<TensorImpl> impl;
  et::EValue value;
};

struct Backend {
  Backend() : memory(ethost_trt::make_host_memory(false)), provider(new FakeProvider(&script)) {
    et::runtime_init();
    ethost_trt::use_memory(memory);
    ethost_trt::set_engine_provider(provider);
    backend = et::get_backend_class("TensorRTBackend");
  }
  ~Backend() {
    ethost_trt::set_engine_provider(nullptr);
    ethost_trt::use_memory(nullptr);
  }

  // init on a blob copied into a buffer whose release is counted in `processed_freed`.
  et::Result<et::DelegateHandle*> init(const std::vector<uint8_t>& blob, et::MemoryAllocator* owner,
                                       const et::NamedDataMap* data = nullptr) {
    bytes = blob;
    et::FreeableBuffer processed(bytes.data(), bytes.size(), count_free, &processed_freed);
    et::BackendInitContext context(owner, nullptr, "forward", data);
    return backend->init(context, &processed, {});
  }

  Script script = dynamic_batch();
  std::shared_ptr<ethost_trt::DeviceMemory> memory;
  std::shared_ptr<FakeProvider> provider;
  et::BackendInterface* backend = nullptr;
  std::vector<uint8_t> bytes;
  int processed_freed = 0;
  std::array<uint8_t, 64> arena{};
  et::MemoryAllocator allocator{static_cast<uint32_t>(arena.size()), arena.data()};
};

}  // namespace

TEST(the_backend_registers_itself_when_its_library_is_loaded) {
  CHECK(ethost_trt::registration_error() == nullptr);
  Backend b;
  CHECK(b.backend != nullptr);
  CHECK(b.backend != nullptr && b.backend->is_available());
}

TEST(init_deserializes_the_inline_plan_names_the_instance_and_frees_the_blob) {
  Backend b;
  ethost_trt::set_instance_owner("model-a");
  auto first = b.init(ethost_test::blob(std::string(kMeta) + "}", "PLAN"), &b.allocator);
  auto second = b.init(ethost_test::blob(std::string(kMeta) + "}", "PLAN"), &b.allocator);
  CHECK(first.ok() && second.ok());
  CHECK(b.processed_freed == 2 && b.provider->plans.size() == 2 && b.provider->plans[0] == "PLAN");
  std::vector<size_t> ordinals;
  for (const auto& r : ethost_trt::all_runner_counters()) {
    if (r.origin.owner == "model-a") {
      CHECK(r.origin.method == "forward");
      ordinals.push_back(r.origin.ordinal);
    }
  }
  CHECK(ordinals.size() == 2 && ordinals[0] + ordinals[1] == 1);  // 0 and 1, in either order
  ethost_trt::set_instance_owner("");
  if (first.ok()) b.backend->destroy(first.get());
  if (second.ok()) b.backend->destroy(second.get());
  size_t left = 0;
  for (const auto& r : ethost_trt::all_runner_counters()) left += r.origin.owner == "model-a";
  CHECK(left == 0);
}

TEST(init_takes_an_external_plan_from_named_data_and_releases_it) {
  Backend b;
  OneEntry data("k_engine", "EXTERNAL-PLAN");
  auto blob = ethost_test::blob(std::string(kMeta) + R"(, "engine_key": "k_engine"})", "");
  auto handle = b.init(blob, &b.allocator, &data);
  CHECK(handle.ok() && b.provider->plans.back() == "EXTERNAL-PLAN");
  CHECK(data.freed == 1 && b.processed_freed == 1);
  if (handle.ok()) b.backend->destroy(handle.get());

  auto without = b.init(blob, &b.allocator, nullptr);
  CHECK(!without.ok() && without.error() == Error::InvalidExternalData);
  OneEntry other("other", "X");
  auto missing = b.init(blob, &b.allocator, &other);
  CHECK(!missing.ok() && missing.error() == Error::InvalidExternalData);
  CHECK(b.processed_freed == 3);
}

TEST(init_failures_are_executorch_errors) {
  Backend b;
  b.provider->fails = ethost_trt::Status(Error::DelegateInvalidCompatibility, "wrong GPU");
  auto refused = b.init(ethost_test::blob(std::string(kMeta) + "}", "PLAN"), &b.allocator);
  CHECK(!refused.ok() && refused.error() == Error::DelegateInvalidCompatibility);
  auto garbage = b.init(std::vector<uint8_t>(40, 0), &b.allocator);
  CHECK(!garbage.ok() && garbage.error() == Error::InvalidProgram);
  CHECK(b.processed_freed == 2);
}

TEST(execute_runs_the_engine_and_resizes_outputs_to_its_shapes) {
  Backend b;
  auto handle = b.init(ethost_test::blob(std::string(kMeta) + "}", "PLAN"), &b.allocator);
  CHECK(handle.ok());
  if (!handle.ok()) return;
  DeviceTensor x(*b.memory, 3);
  DeviceTensor y(*b.memory, 8);  // planned at its bound; the engine says [3, 4]
  for (int i = 0; i < 12; ++i) x.floats()[i] = static_cast<float>(i);
  std::array<et::EValue*, 2> args{&x.value, &y.value};
  et::BackendExecutionContext context;
  Error ran = b.backend->execute(context, handle.get(), {args.data(), args.size()});
  CHECK(ran == Error::Ok);
  CHECK(y.value.toTensor().size(0) == 3 && y.value.toTensor().nbytes() == 48);
  bool plus_one = true;
  for (int i = 0; i < 12; ++i) plus_one = plus_one && y.floats()[i] == static_cast<float>(i + 1);
  CHECK(plus_one);

  // What the runner refuses comes back as InvalidArgument (the reason goes to the log).
  DeviceTensor ints(*b.memory, 2, ScalarType::Int);
  std::array<et::EValue*, 2> wrong_dtype{&ints.value, &y.value};
  CHECK(b.backend->execute(context, handle.get(), {wrong_dtype.data(), 2}) ==
        Error::InvalidArgument);
  et::EValue not_a_tensor(int64_t{7});
  std::array<et::EValue*, 2> scalar{&not_a_tensor, &y.value};
  CHECK(b.backend->execute(context, handle.get(), {scalar.data(), 2}) == Error::InvalidArgument);
  std::array<et::EValue*, 1> one{&x.value};
  CHECK(b.backend->execute(context, handle.get(), {one.data(), 1}) == Error::InvalidArgument);
  b.backend->destroy(handle.get());
}

TEST(an_output_too_small_for_the_engines_shape_fails_the_execute) {
  Backend b;
  auto handle = b.init(ethost_test::blob(std::string(kMeta) + "}", "PLAN"), &b.allocator);
  CHECK(handle.ok());
  if (!handle.ok()) return;
  DeviceTensor x(*b.memory, 4);
  DeviceTensor y(*b.memory, 2);
  // A static output of [2, 4] cannot take the engine's [4, 4].
  TensorImpl fixed(ScalarType::Float, 2, y.sizes.data(), y.data, y.dim_order.data(),
                   y.strides.data());
  et::EValue out{Tensor(&fixed)};
  std::array<et::EValue*, 2> args{&x.value, &out};
  et::BackendExecutionContext context;
  CHECK(b.backend->execute(context, handle.get(), {args.data(), 2}) != Error::Ok);
  CHECK(b.script.executes.empty());
  b.backend->destroy(handle.get());
}
