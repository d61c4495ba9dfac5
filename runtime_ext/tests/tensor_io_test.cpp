// The host's copy of a method's outputs: every value kind it returns, the copy being the
// caller's own (a later execute cannot change it), what it refuses with the output's index, and
// outputs in "device" memory (the host-memory stand-in) copied through DeviceCopies.
#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include <executorch/runtime/platform/runtime.h>

#include "check.h"
#include "device_memory.h"
#include "tensor_io.h"

using namespace ethost;
using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::aten::TensorImpl;
using executorch::runtime::EValue;

namespace {

struct HostTensor {
  HostTensor(std::vector<executorch::aten::SizesType> shape, void* storage,
             ScalarType dtype = ScalarType::Float)
      : sizes(std::move(shape)) {
    impl = std::make_unique<TensorImpl>(dtype, static_cast<ssize_t>(sizes.size()), sizes.data(),
                                        storage);
    value = EValue(Tensor(impl.get()));
  }
  std::vector<executorch::aten::SizesType> sizes;
  std::unique_ptr<TensorImpl> impl;
  EValue value;
};

}  // namespace

TEST(a_tensor_output_is_copied_with_its_dtype_and_shape) {
  executorch::runtime::runtime_init();
  std::array<float, 6> data{1, 2, 3, 4, 5, 6};
  HostTensor t({2, 3}, data.data());
  auto out = copy_output(t.value, 0, "forward", nullptr);
  CHECK(out.ok());
  if (!out.ok()) return;
  CHECK(!out.value().is_none && out.value().dtype == ScalarType::Float);
  CHECK(out.value().shape == (std::vector<size_t>{2, 3}));
  CHECK(std::memcmp(out.value().data.get(), data.data(), sizeof(data)) == 0);
  data[0] = 99;  // the planned buffer is reused by the next execute
  CHECK(reinterpret_cast<const float*>(out.value().data.get())[0] == 1.0f);
}

TEST(scalar_outputs_become_zero_dimensional_values) {
  auto i = copy_output(EValue(int64_t{-7}), 0, "forward", nullptr);
  CHECK(i.ok() && i.value().dtype == ScalarType::Long && i.value().shape.empty());
  CHECK(i.ok() && *reinterpret_cast<const int64_t*>(i.value().data.get()) == -7);
  auto d = copy_output(EValue(2.5), 1, "forward", nullptr);
  CHECK(d.ok() && d.value().dtype == ScalarType::Double);
  CHECK(d.ok() && *reinterpret_cast<const double*>(d.value().data.get()) == 2.5);
  auto b = copy_output(EValue(true), 2, "forward", nullptr);
  CHECK(b.ok() && b.value().dtype == ScalarType::Bool);
  CHECK(b.ok() && *reinterpret_cast<const bool*>(b.value().data.get()));
  auto none = copy_output(EValue(), 3, "forward", nullptr);
  CHECK(none.ok() && none.value().is_none && !none.value().data);
}

TEST(an_empty_tensor_still_gets_storage) {
  HostTensor t({0, 3}, nullptr);
  auto out = copy_output(t.value, 0, "forward", nullptr);
  CHECK(out.ok() && out.value().data != nullptr);
  CHECK(out.ok() && out.value().shape == (std::vector<size_t>{0, 3}));
}

TEST(values_the_host_cannot_return_are_refused_naming_the_output) {
  std::array<double, 2> values{1.0, 2.0};
  executorch::aten::ArrayRef<double> list(values.data(), values.size());
  auto refused = copy_output(EValue(&list), 4, "forward", nullptr);
  CHECK(!refused.ok() && refused.status().code == Error::NotSupported);
  if (refused.ok()) return;
  CHECK_CONTAINS(refused.status().reason,
                 "output 4 has tag ListDouble, which the host cannot return");
  CHECK_CONTAINS(refused.status().message(), "reading outputs of method 'forward'");

  std::array<float, 4> storage{};
  HostTensor complex({2}, storage.data(), ScalarType::ComplexFloat);
  auto no_numpy = copy_output(complex.value, 1, "forward", nullptr);
  CHECK(!no_numpy.ok());
  if (!no_numpy.ok()) {
    CHECK_CONTAINS(no_numpy.status().reason, "output 1 has dtype ComplexFloat");
    CHECK_CONTAINS(no_numpy.status().reason, "which numpy cannot hold");
  }
}

TEST(dtype_names_are_numpys_or_executorchs_own) {
  CHECK(std::string(dtype_name(ScalarType::Float)) == "float32");
  CHECK(std::string(dtype_name(ScalarType::BFloat16)) == "bfloat16");
  CHECK(std::string(dtype_name(ScalarType::Long)) == "int64");
  CHECK(std::string(dtype_name(ScalarType::ComplexFloat)) == "ComplexFloat");
}

TEST(a_device_output_is_copied_through_the_device_stream) {
  auto memory = ethost_device::make_host_memory(false);
  auto copies = DeviceCopies::create(memory, "/models/m.pte");
  CHECK(copies.ok());
  if (!copies.ok()) return;
  void* device = memory->allocate(4 * sizeof(float)).value();
  std::array<float, 4> expected{0.5f, 1.5f, 2.5f, 3.5f};
  std::memcpy(device, expected.data(), sizeof(expected));
  HostTensor t({4}, device);
  auto out = copy_output(t.value, 0, "forward", copies.value().get());
  CHECK(out.ok() && copies.value()->finish().ok());
  CHECK(out.ok() && std::memcmp(out.value().data.get(), expected.data(), sizeof(expected)) == 0);
  memory->release(device);
}

TEST(a_failed_device_copy_says_which_output_and_why) {
  // A host pointer where the copy expects device memory: the stand-in refuses the direction, as
  // CUDA would fault, and the failure names the output.
  auto memory = ethost_device::make_host_memory(false);
  auto copies = DeviceCopies::create(memory, "/models/m.pte");
  CHECK(copies.ok());
  if (!copies.ok()) return;
  std::array<float, 4> host{};
  HostTensor t({4}, host.data());
  auto out = copy_output(t.value, 2, "forward", copies.value().get());
  CHECK(!out.ok());
  if (out.ok()) return;
  CHECK_CONTAINS(out.status().reason, "copying output 2 from device memory: copy of 16 bytes");
  CHECK_CONTAINS(out.status().message(), "reading outputs of method 'forward'");
}
