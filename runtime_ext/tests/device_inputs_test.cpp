// Inputs in device memory through a method instance, on real exported programs with the
// host-memory stand-in as the device: each is filled by one device-to-host copy (never a CPU
// memcpy of device memory), into the planned buffer or, for an input left out of planning that
// CPU kernels read, into a host buffer of the instance; and the refusals: an address the device
// memory does not own, and a host without device memory. (An unplanned input only a device
// delegate reads is bound as it is: tests/unit/test_device_inputs.py, with the TensorRT
// delegate; plan_reader_test.cpp for the reading of the plan.)
//
// Programs (ETHOST_TEST_PROGRAMS, exported by tests/unit/test_native_checks.py): cpu.pte plans
// its input in host memory, unplanned.pte leaves it out of planning; both are linear + relu on
// the CPU.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <executorch/runtime/platform/runtime.h>

#include "check.h"
#include "device_inputs.h"
#include "device_memory.h"
#include "method_instance.h"
#include "program.h"

using namespace ethost;
using ethost_device::CopyKind;
using ethost_device::DeviceMemory;

namespace {

std::shared_ptr<const LoadedProgram> open(const char* file) {
  executorch::runtime::runtime_init();
  const char* dir = std::getenv("ETHOST_TEST_PROGRAMS");
  if (dir == nullptr || dir[0] == '\0') {
    std::fprintf(stderr, "ETHOST_TEST_PROGRAMS is not set (tests/unit/test_native_checks.py)\n");
    ++ethost_test::failures();
    return nullptr;
  }
  auto loaded = LoadedProgram::open(std::string(dir) + "/" + file, {});
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.status().message().c_str());
    ++ethost_test::failures();
    return nullptr;
  }
  return loaded.take();
}

// The host-memory stand-in, counting the copies queued on it by kind.
class CountingMemory final : public DeviceMemory {
 public:
  CountingMemory() : inner_(ethost_device::make_host_memory(false)) {}
  const char* kind() const override { return "counting"; }
  int device_id() const override { return 0; }
  bool reads_pageable_host_memory() const override { return false; }
  bool is_device_pointer(const void* p) const override { return inner_->is_device_pointer(p); }
  Outcome<void*> allocate(size_t nbytes) override { return inner_->allocate(nbytes); }
  void release(void* p) override { inner_->release(p); }
  Status copy_async(void* dst, const void* src, size_t n, CopyKind kind,
                    ethost_device::StreamHandle stream) override {
    ++copies[static_cast<int>(kind)];
    return inner_->copy_async(dst, src, n, kind, stream);
  }
  Outcome<ethost_device::StreamHandle> create_stream() override { return inner_->create_stream(); }
  Status synchronize(ethost_device::StreamHandle s) override { return inner_->synchronize(s); }
  void destroy_stream(ethost_device::StreamHandle s) override { inner_->destroy_stream(s); }
  Status pin_host(void* p, size_t nbytes) override {
    if (refuse_pins) return Status(Error::Internal, "cudaHostRegister failed: stand-in");
    pins.emplace_back(p, nbytes);
    return Status();
  }
  Status unpin_host(void* p) override {
    unpins.push_back(p);
    return Status();
  }

  int copies[4] = {0, 0, 0, 0};
  std::vector<std::pair<void*, size_t>> pins;
  std::vector<void*> unpins;
  bool refuse_pins = false;

 private:
  std::shared_ptr<DeviceMemory> inner_;
};

// `file`'s forward method, loaded with a fresh counting memory as the process's device memory
// (`refuse_pins`: one that refuses to lock host memory); none, and a failed check, when it
// does not load.
struct OnCounting {
  std::shared_ptr<CountingMemory> memory;
  std::unique_ptr<MethodInstance> method;
};

std::optional<OnCounting> load_on_counting(const char* file, bool refuse_pins = false) {
  auto program = open(file);
  if (!program) return std::nullopt;
  auto memory = std::make_shared<CountingMemory>();
  memory->refuse_pins = refuse_pins;
  ethost_device::use_memory(memory);
  auto method = MethodInstance::load(program, "forward");
  CHECK(method.ok());
  if (!method.ok()) return std::nullopt;
  return OnCounting{memory, method.take()};
}

constexpr float kInput[8] = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f, -2.0f, 3.0f};

InputBinding input_at(void* data, bool on_device) {
  InputBinding in;
  in.is_tensor = true;
  in.dtype = executorch::aten::ScalarType::Float;
  in.ndim = 2;
  in.sizes[0] = 2;
  in.sizes[1] = 4;
  in.dim_order[0] = 0;
  in.dim_order[1] = 1;
  in.strides[0] = 4;
  in.strides[1] = 1;
  in.data = data;
  in.on_device = on_device;
  return in;
}

std::vector<float> values(const OutputBuffer& out) {
  size_t n = 1;
  for (size_t extent : out.shape) n *= extent;
  std::vector<float> v(n);
  std::memcpy(v.data(), out.data.get(), n * sizeof(float));
  return v;
}

// The outputs of one run with the input in host memory, then one with it in device memory.
struct Runs {
  std::vector<float> from_host, from_device;
  Status device_status;
};

Runs run_both(MethodInstance& method, CountingMemory& memory) {
  Runs runs;
  float host[8];
  std::memcpy(host, kInput, sizeof(host));
  std::vector<InputBinding> inputs{input_at(host, false)};
  auto ran = method.run(inputs);
  CHECK(ran.ok());
  if (ran.ok()) runs.from_host = values(ran.value()[0]);
  void* device = memory.allocate(sizeof(kInput)).take();
  std::memcpy(device, kInput, sizeof(kInput));  // the stand-in's device memory is host memory
  inputs = {input_at(device, true)};
  auto on_device = method.run(inputs);
  runs.device_status = status_of(on_device);
  if (on_device.ok()) runs.from_device = values(on_device.value()[0]);
  memory.release(device);
  return runs;
}

// The one lock taken since `before`, checked: whole pages from a page boundary, counted. Null
// when there is not exactly one.
std::pair<void*, size_t> the_one_lock(const CountingMemory& memory, const PinnedCounts& before) {
  CHECK(memory.pins.size() == 1);
  if (memory.pins.size() != 1) return {nullptr, 0};
  auto [locked, nbytes] = memory.pins[0];
  CHECK(reinterpret_cast<uintptr_t>(locked) % kHostPage == 0 && nbytes % kHostPage == 0);
  CHECK(pinned_counts().pinned == before.pinned + 1);
  CHECK(pinned_counts().locked_bytes == before.locked_bytes + nbytes);
  return {locked, nbytes};
}

// Closing the instance unlocks `locked`, and only it, before its pages are freed.
void closing_unlocks(std::unique_ptr<MethodInstance>& method, const CountingMemory& memory,
                     void* locked, const PinnedCounts& before) {
  CHECK(memory.unpins.empty());
  method.reset();
  CHECK(memory.unpins.size() == 1 && !memory.unpins.empty() && memory.unpins[0] == locked);
  CHECK(pinned_counts().locked_bytes == before.locked_bytes);
}

}  // namespace

TEST(routes_follow_where_the_input_is_planned_and_who_reads_it) {
  CHECK(route_device_input(false, false, true) == DeviceInputRoute::Bound);
  CHECK(route_device_input(false, false, false) == DeviceInputRoute::ToHostBuffer);
  CHECK(route_device_input(false, true, true) == DeviceInputRoute::ToPlannedHost);
  CHECK(route_device_input(true, true, true) == DeviceInputRoute::DeviceToDevice);
}

TEST(an_unplanned_input_cpu_kernels_read_is_copied_into_host_memory) {
  auto loaded = load_on_counting("unplanned.pte");
  if (!loaded) return;
  auto& [memory, method] = *loaded;
  CHECK(!method->spec().inputs[0].memory_planned);
  CHECK(!method->spec().inputs[0].read_by_device_delegates_only);
  DeviceInputCounts before = device_input_counts();
  Runs runs = run_both(*method, *memory);
  CHECK(runs.device_status.ok());
  CHECK(!runs.from_host.empty() && runs.from_device == runs.from_host);
  CHECK(memory->copies[static_cast<int>(CopyKind::DeviceToHost)] == 1);
  DeviceInputCounts after = device_input_counts();
  CHECK(after.to_host == before.to_host + 1);
  CHECK(after.bound == before.bound && after.device_to_device == before.device_to_device);
  ethost_device::use_memory(nullptr);
}

TEST(an_input_planned_in_host_memory_takes_one_device_to_host_copy) {
  auto loaded = load_on_counting("cpu.pte");
  if (!loaded) return;
  auto& [memory, method] = *loaded;
  CHECK(method->spec().inputs[0].memory_planned);
  DeviceInputCounts before = device_input_counts();
  Runs runs = run_both(*method, *memory);
  CHECK(runs.device_status.ok());
  CHECK(!runs.from_host.empty() && runs.from_device == runs.from_host);
  CHECK(memory->copies[static_cast<int>(CopyKind::DeviceToHost)] == 1);
  CHECK(memory->copies[static_cast<int>(CopyKind::HostToDevice)] == 0);
  CHECK(device_input_counts().to_host == before.to_host + 1);
  CHECK(device_input_counts().bound == before.bound);
  ethost_device::use_memory(nullptr);
}

TEST(an_address_the_device_memory_does_not_own_is_refused) {
  auto loaded = load_on_counting("unplanned.pte");
  if (!loaded) return;
  auto& [memory, method] = *loaded;
  float host[8] = {};
  std::vector<InputBinding> inputs{input_at(host, true)};
  auto ran = method->run(inputs);
  CHECK(!ran.ok());
  if (!ran.ok()) {
    CHECK(ran.status().code == Error::InvalidArgument);
    CHECK_CONTAINS(ran.status().message(), "setting input 0 of method 'forward'");
    CHECK_CONTAINS(ran.status().message(), "counting memory does not recognize");
  }
  ethost_device::use_memory(nullptr);
}

TEST(a_device_input_on_a_host_without_device_memory_is_refused) {
  auto program = open("cpu.pte");
  if (!program) return;
  ethost_device::use_memory(nullptr);               // CUDA, which this CPU host lacks
  if (ethost_device::active_memory().ok()) return;  // a CUDA host: nothing to refuse
  auto method = MethodInstance::load(program, "forward");
  CHECK(method.ok());
  if (!method.ok()) return;
  float data[8] = {};
  std::vector<InputBinding> inputs{input_at(data, true)};
  auto ran = method.value()->run(inputs);
  CHECK(!ran.ok());
  if (!ran.ok()) {
    CHECK(ran.status().code == Error::NotSupported);
    CHECK_CONTAINS(ran.status().message(), "no device memory to read it from");
  }
}

TEST(output_routes_follow_planning_and_who_writes_it) {
  CHECK(route_device_output(false, true, false) == DeviceOutputRoute::Bound);
  CHECK(route_device_output(false, false, false) == DeviceOutputRoute::FromHost);
  CHECK(route_device_output(true, true, false) == DeviceOutputRoute::FromHost);
  CHECK(route_device_output(true, false, true) == DeviceOutputRoute::DeviceToDevice);
}

TEST(an_output_planned_in_host_memory_takes_one_host_to_device_copy_into_its_destination) {
  auto loaded = load_on_counting("cpu.pte");
  if (!loaded) return;
  auto& [memory, method] = *loaded;
  CHECK(method->spec().outputs[0].memory_planned);
  float host[8];
  std::memcpy(host, kInput, sizeof(host));
  std::vector<InputBinding> inputs{input_at(host, false)};
  auto expected = method->run(inputs);
  CHECK(expected.ok());
  if (!expected.ok()) return;
  size_t nbytes = values(expected.value()[0]).size() * sizeof(float);
  void* device = memory->allocate(nbytes).take();
  std::vector<OutputDestination> into{{device, nbytes}};
  DeviceOutputCounts before = device_output_counts();
  auto ran = method->run(inputs, &into);
  CHECK(ran.ok());
  if (ran.ok()) {
    const OutputBuffer& out = ran.value()[0];
    CHECK(out.in_destination && out.data == nullptr);
    CHECK(out.shape == expected.value()[0].shape);
    std::vector<float> written(nbytes / sizeof(float));
    std::memcpy(written.data(), device, nbytes);  // the stand-in's device memory is host memory
    CHECK(written == values(expected.value()[0]));
  }
  CHECK(memory->copies[static_cast<int>(CopyKind::HostToDevice)] == 1);
  CHECK(memory->copies[static_cast<int>(CopyKind::DeviceToHost)] == 0);
  DeviceOutputCounts after = device_output_counts();
  CHECK(after.from_host == before.from_host + 1);
  CHECK(after.bound == before.bound && after.device_to_device == before.device_to_device);
  memory->release(device);
  ethost_device::use_memory(nullptr);
}

// A copy from pageable memory is staged through the CPU by the driver; the planned buffers a
// device copy touches are page-locked once, in whole pages, and unlocked before they are freed.
TEST(planned_host_buffers_device_copies_touch_are_locked_once_and_unlocked_when_closed) {
  auto loaded = load_on_counting("cpu.pte");
  if (!loaded) return;
  auto& [memory, method] = *loaded;
  std::vector<uintptr_t> buffers = method->arena_addresses();
  PinnedCounts before = pinned_counts();
  Runs first = run_both(*method, *memory);
  CHECK(first.device_status.ok() && first.from_device == first.from_host);
  auto [locked, nbytes] = the_one_lock(*memory, before);
  if (locked == nullptr) return;
  CHECK(std::find(buffers.begin(), buffers.end(), reinterpret_cast<uintptr_t>(locked)) !=
        buffers.end());
  // The output, planned in the same buffer, and a second request lock nothing more.
  Runs second = run_both(*method, *memory);
  CHECK(second.from_device == first.from_host);
  size_t out_bytes = first.from_host.size() * sizeof(float);
  void* device = memory->allocate(out_bytes).take();
  float host[8];
  std::memcpy(host, kInput, sizeof(host));
  std::vector<InputBinding> inputs{input_at(host, false)};
  std::vector<OutputDestination> into{{device, out_bytes}};
  CHECK(method->run(inputs, &into).ok());
  memory->release(device);
  CHECK(memory->pins.size() == 1);
  closing_unlocks(method, *memory, locked, before);
  ethost_device::use_memory(nullptr);
}

TEST(a_buffer_the_driver_refuses_to_lock_stays_pageable_and_its_copies_still_work) {
  auto loaded = load_on_counting("cpu.pte", true);
  if (!loaded) return;
  auto& [memory, method] = *loaded;
  PinnedCounts before = pinned_counts();
  Runs first = run_both(*method, *memory);
  CHECK(first.device_status.ok() && first.from_device == first.from_host);
  Runs second = run_both(*method, *memory);  // not asked again
  CHECK(second.device_status.ok() && second.from_device == first.from_host);
  CHECK(pinned_counts().refused == before.refused + 1);
  CHECK(pinned_counts().pinned == before.pinned);
  method.reset();
  CHECK(memory->unpins.empty());
  ethost_device::use_memory(nullptr);
}

// An unplanned input CPU kernels read is copied into the instance's own host memory: locked on
// the first copy, in whole pages of its own (not an arena's), and unlocked when the instance
// closes.
TEST(an_instances_own_host_copy_of_a_device_input_is_locked_once_and_unlocked_when_closed) {
  auto loaded = load_on_counting("unplanned.pte");
  if (!loaded) return;
  auto& [memory, method] = *loaded;
  std::vector<uintptr_t> arenas = method->arena_addresses();
  PinnedCounts before = pinned_counts();
  Runs first = run_both(*method, *memory);
  CHECK(first.device_status.ok() && first.from_device == first.from_host);
  Runs second = run_both(*method, *memory);
  CHECK(second.device_status.ok() && second.from_device == first.from_host);
  CHECK(memory->copies[static_cast<int>(CopyKind::DeviceToHost)] == 2);
  auto [locked, nbytes] = the_one_lock(*memory, before);
  if (locked == nullptr) return;
  CHECK(std::find(arenas.begin(), arenas.end(), reinterpret_cast<uintptr_t>(locked)) ==
        arenas.end());
  CHECK(nbytes == kHostPage);
  closing_unlocks(method, *memory, locked, before);
  ethost_device::use_memory(nullptr);
}

TEST(a_destination_too_small_or_not_device_memory_is_refused_naming_the_output) {
  auto loaded = load_on_counting("cpu.pte");
  if (!loaded) return;
  auto& [memory, method] = *loaded;
  float host[8];
  std::memcpy(host, kInput, sizeof(host));
  std::vector<InputBinding> inputs{input_at(host, false)};
  void* device = memory->allocate(4).take();
  DeviceOutputCounts before = device_output_counts();
  std::vector<OutputDestination> small{{device, 4}};
  auto ran = method->run(inputs, &small);
  CHECK(!ran.ok());
  if (!ran.ok()) {
    CHECK(ran.status().code == Error::InvalidArgument);
    CHECK_CONTAINS(ran.status().message(), "writing output 0 of method 'forward'");
    CHECK_CONTAINS(ran.status().message(), "destination holds 4 bytes");
  }
  float not_device[64] = {};
  std::vector<OutputDestination> host_memory{{not_device, sizeof(not_device)}};
  ran = method->run(inputs, &host_memory);
  CHECK(!ran.ok());
  if (!ran.ok()) CHECK_CONTAINS(ran.status().message(), "is not counting device memory");
  std::vector<OutputDestination> two{{}, {}};
  ran = method->run(inputs, &two);
  CHECK(!ran.ok());
  if (!ran.ok()) CHECK_CONTAINS(ran.status().message(), "expected 1 output destinations");
  CHECK(memory->copies[static_cast<int>(CopyKind::HostToDevice)] == 0);
  CHECK(device_output_counts().from_host == before.from_host);
  memory->release(device);
  ethost_device::use_memory(nullptr);
}
