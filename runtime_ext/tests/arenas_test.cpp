// A method instance's planned arenas, on real exported programs: host buffers 256-byte aligned,
// buffers planned in CUDA memory taken from the active device memory (the host-memory stand-in
// here) and given back to it, and the refusals when that memory cannot hold them.
//
// The programs come from the folder ETHOST_TEST_PROGRAMS names (tests/unit/test_native_checks.py
// exports them there): cpu.pte plans only host buffers, device.pte plans buffers in cuda:0.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <executorch/runtime/platform/runtime.h>

#include "arenas.h"
#include "check.h"
#include "device_memory.h"
#include "program.h"

using namespace ethost;
using ethost_device::DeviceMemory;

namespace {

std::string program_path(const char* file) {
  const char* dir = std::getenv("ETHOST_TEST_PROGRAMS");
  if (dir == nullptr || dir[0] == '\0') {
    std::fprintf(stderr,
                 "ETHOST_TEST_PROGRAMS is not set: it names the folder holding cpu.pte and "
                 "device.pte (tests/unit/test_native_checks.py exports them)\n");
    ++ethost_test::failures();
    return "";
  }
  return std::string(dir) + "/" + file;
}

std::shared_ptr<LoadedProgram> open(const char* file) {
  executorch::runtime::runtime_init();
  std::string path = program_path(file);
  if (path.empty()) return nullptr;
  auto loaded = LoadedProgram::open(path, {});
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.status().message().c_str());
    ++ethost_test::failures();
    return nullptr;
  }
  return loaded.take();
}

// Forwards to the host-memory stand-in, claiming another device id or failing allocations after
// `allow` of them, and counts what was allocated and released.
class ScriptedMemory final : public DeviceMemory {
 public:
  ScriptedMemory(int device, int allow)
      : inner_(ethost_device::make_host_memory(false)), device_(device), allow_(allow) {}
  const char* kind() const override { return "scripted"; }
  int device_id() const override { return device_; }
  bool reads_pageable_host_memory() const override { return false; }
  bool is_device_pointer(const void* p) const override { return inner_->is_device_pointer(p); }
  Outcome<void*> allocate(size_t nbytes) override {
    if (allow_-- <= 0) return Status(Error::MemoryAllocationFailed, "cudaMalloc: out of memory");
    ++allocated;
    return inner_->allocate(nbytes);
  }
  void release(void* p) override {
    ++released;
    inner_->release(p);
  }
  Status copy_async(void* dst, const void* src, size_t n, ethost_device::CopyKind kind,
                    ethost_device::StreamHandle stream) override {
    return inner_->copy_async(dst, src, n, kind, stream);
  }
  Outcome<ethost_device::StreamHandle> create_stream() override { return inner_->create_stream(); }
  Status synchronize(ethost_device::StreamHandle s) override { return inner_->synchronize(s); }
  void destroy_stream(ethost_device::StreamHandle s) override { inner_->destroy_stream(s); }

  int allocated = 0;
  int released = 0;

 private:
  std::shared_ptr<DeviceMemory> inner_;
  int device_;
  int allow_;
};

size_t device_buffers(const executorch::runtime::MethodMeta& meta) {
  size_t n = 0;
  for (size_t i = 0; i < meta.num_memory_planned_buffers(); ++i) {
    n += !meta.memory_planned_buffer_device(i)->is_cpu();
  }
  return n;
}

}  // namespace

TEST(host_arenas_are_256_byte_aligned_and_not_device_memory) {
  auto program = open("cpu.pte");
  if (!program) return;
  auto meta = program->method_meta("forward");
  CHECK(meta.ok() && meta.value().num_memory_planned_buffers() > 0 &&
        device_buffers(meta.value()) == 0);
  auto arenas = PlannedArenas::allocate(meta.value(), program->path());
  CHECK(arenas.ok());
  if (!arenas.ok()) return;
  auto addresses = arenas.value()->addresses();
  CHECK(addresses.size() == meta.value().num_memory_planned_buffers());
  for (uintptr_t a : addresses) {
    CHECK(a != 0 && a % kArenaAlignment == 0);
    CHECK(!arenas.value()->on_device(reinterpret_cast<const void*>(a)));
  }
  CHECK(arenas.value()->device_memory() == nullptr);
  CHECK(arenas.value()->allocator() != nullptr);
}

TEST(device_planned_buffers_come_from_the_active_device_memory_and_go_back_to_it) {
  auto program = open("device.pte");
  if (!program) return;
  auto meta = program->method_meta("forward");
  CHECK(meta.ok() && device_buffers(meta.value()) > 0);
  if (!meta.ok()) return;
  auto memory = std::make_shared<ScriptedMemory>(0, 1000);
  ethost_device::use_memory(memory);
  std::vector<uintptr_t> addresses;
  {
    auto arenas = PlannedArenas::allocate(meta.value(), program->path());
    CHECK(arenas.ok());
    if (!arenas.ok()) return;
    CHECK(arenas.value()->device_memory() == memory);
    addresses = arenas.value()->addresses();
    for (size_t i = 0; i < addresses.size(); ++i) {
      auto* p = reinterpret_cast<const void*>(addresses[i]);
      bool on_cuda = !meta.value().memory_planned_buffer_device(i)->is_cpu();
      CHECK(arenas.value()->on_device(p) == on_cuda);
      CHECK(memory->is_device_pointer(p) == on_cuda);
      CHECK(addresses[i] % kArenaAlignment == 0);
      if (on_cuda) {
        auto size = static_cast<size_t>(meta.value().memory_planned_buffer_size(i).get());
        CHECK(arenas.value()->on_device(static_cast<const uint8_t*>(p) + size - 1));
        CHECK(!arenas.value()->on_device(static_cast<const uint8_t*>(p) + size));
      }
    }
    CHECK(memory->allocated == static_cast<int>(device_buffers(meta.value())));
  }
  CHECK(memory->released == memory->allocated);
  for (uintptr_t a : addresses) CHECK(!memory->is_device_pointer(reinterpret_cast<void*>(a)));
  ethost_device::use_memory(nullptr);
}

TEST(buffers_planned_on_another_device_are_refused) {
  auto program = open("device.pte");
  if (!program) return;
  auto meta = program->method_meta("forward");
  if (!meta.ok()) return;
  auto memory = std::make_shared<ScriptedMemory>(1, 1000);
  ethost_device::use_memory(memory);
  auto arenas = PlannedArenas::allocate(meta.value(), program->path());
  CHECK(!arenas.ok() && arenas.status().code == Error::NotSupported);
  if (!arenas.ok()) {
    CHECK_CONTAINS(arenas.status().reason,
                   "is planned in cuda:0 memory, but this process "
                   "allocates device memory on cuda:1");
    CHECK_CONTAINS(arenas.status().message(), "allocating planned buffers of method 'forward'");
    CHECK_CONTAINS(arenas.status().message(), "device.pte");
  }
  CHECK(memory->allocated == 0);
  ethost_device::use_memory(nullptr);
}

TEST(a_failed_device_allocation_names_the_buffer_and_frees_the_others) {
  auto program = open("device.pte");
  if (!program) return;
  auto meta = program->method_meta("forward");
  if (!meta.ok()) return;
  size_t wanted = device_buffers(meta.value());
  // The last device buffer fails; every one allocated before it is released.
  auto memory = std::make_shared<ScriptedMemory>(0, static_cast<int>(wanted) - 1);
  ethost_device::use_memory(memory);
  auto arenas = PlannedArenas::allocate(meta.value(), program->path());
  CHECK(!arenas.ok() && arenas.status().code == Error::MemoryAllocationFailed);
  if (!arenas.ok()) {
    CHECK_CONTAINS(arenas.status().reason,
                   "bytes) is planned in cuda:0 memory; cudaMalloc: out "
                   "of memory");
    CHECK_CONTAINS(arenas.status().reason, "planned buffer ");
  }
  CHECK(memory->released == memory->allocated);
  ethost_device::use_memory(nullptr);
}
