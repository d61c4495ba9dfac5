// The engine runner (the delegate's hot path) over a fake engine and the host-memory stand-in
// for the GPU: what it checks before running (argument count, dtypes, shapes against the
// profile, storage), what it binds directly and what it stages, what it resends to the context,
// and how it passes provider failures on.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "check.h"
#include "delegate_init.h"
#include "engine_runner.h"
#include "fake_engine.h"
#include "staging_plan.h"
#include "test_blobs.h"

using namespace ethost_trt;
using ethost_test::element_count;
using ethost_test::FakeProvider;
using ethost_test::Script;
using ethost_test::tensor;

namespace {

// x [B, 4] float32 (B in 1..8 by profile 0) -> y [B, 4]
Script one_in_one_out() {
  Script s;
  EngineIo x = tensor("x", true, {-1, 4});
  x.profile_min = Dims{1, 4};
  x.profile_max = Dims{8, 4};
  s.io = {x, tensor("y", false, {-1, 4})};
  return s;
}

// Blob metadata binding the engine's tensors in the order given (argument order).
BlobMetadata bindings(const std::vector<std::pair<std::string, bool>>& names) {
  BlobMetadata meta;
  for (const auto& [name, is_input] : names) {
    IoBinding b;
    b.name = name;
    b.is_input = is_input;
    meta.io_bindings.push_back(b);
  }
  return meta;
}

struct Fixture {
  explicit Fixture(Script script, bool reads_pageable = false,
                   BlobMetadata meta = bindings({{"x", true}, {"y", false}}))
      : s(std::move(script)), memory(make_host_memory(reads_pageable)) {
    auto made = EngineRunner::create(std::make_shared<ethost_test::FakeEngine>(&s), meta, memory,
                                     "forward#test");
    if (made.ok()) {
      runner = made.take();
    } else {
      created = made.status();
    }
  }

  // A float32 buffer in "device" memory, `offset` bytes past the stand-in's 256-byte boundary.
  IoArg device(Dims shape, size_t offset = 0) {
    size_t nbytes = element_count(shape) * sizeof(float);
    auto got = memory->allocate(nbytes + offset);
    CHECK(got.ok());
    IoArg a;
    a.data = static_cast<uint8_t*>(got.value()) + offset;
    a.nbytes = nbytes;
    a.shape = std::move(shape);
    a.dtype = "float32";
    return a;
  }

  IoArg host(Dims shape) {
    host_buffers.emplace_back(element_count(shape) + 64);
    // 256-aligned inside the vector, so only "host, not device" can make it staged.
    auto p = reinterpret_cast<uintptr_t>(host_buffers.back().data());
    IoArg a;
    a.data = reinterpret_cast<void*>((p + 255) / 256 * 256);
    a.nbytes = element_count(shape) * sizeof(float);
    a.shape = std::move(shape);
    a.dtype = "float32";
    return a;
  }

  Status run(std::vector<IoArg>& args) {
    return runner->run(args, [&](size_t index, const Dims& shape, IoArg* arg) {
      resized.push_back(index);
      arg->shape = shape;
      arg->nbytes = element_count(shape) * sizeof(float);
      return resize_fails;
    });
  }

  Script s;
  std::shared_ptr<DeviceMemory> memory;
  std::unique_ptr<EngineRunner> runner;
  Status created;
  Status resize_fails;
  std::vector<size_t> resized;
  std::vector<std::vector<float>> host_buffers;
};

void fill(const IoArg& a, float start) {
  auto* p = static_cast<float*>(a.data);
  for (size_t i = 0; i < a.nbytes / sizeof(float); ++i) p[i] = start + static_cast<float>(i);
}

bool holds_input_plus_one(const IoArg& out, float start) {
  auto* p = static_cast<const float*>(out.data);
  for (size_t i = 0; i < out.nbytes / sizeof(float); ++i) {
    if (p[i] != start + static_cast<float>(i) + 1.0f) return false;
  }
  return true;
}

const BindingCounters& counter(const EngineRunner& r, const std::string& name) {
  static std::vector<BindingCounters> last;
  last = r.counters();
  for (const auto& c : last) {
    if (c.name == name) return c;
  }
  static BindingCounters none;
  return none;
}

}  // namespace

TEST(aligned_device_buffers_are_bound_directly_and_not_resent) {
  Fixture f(one_in_one_out());
  CHECK(f.runner != nullptr);
  std::vector<IoArg> args = {f.device({2, 4}), f.device({2, 4})};
  fill(args[0], 10);
  CHECK(f.run(args).ok());
  CHECK(holds_input_plus_one(args[1], 10));
  // The shapes reached the context when they were inferred; execute binds the addresses.
  CHECK(f.s.executes.size() == 1 && !f.s.executes[0].sent_shapes && f.s.executes[0].sent_addresses);
  CHECK(f.s.context_shapes == (std::vector<Dims>{{2, 4}}));
  CHECK(f.s.context_addresses[0] == reinterpret_cast<uintptr_t>(args[0].data));
  CHECK(f.s.context_addresses[1] == reinterpret_cast<uintptr_t>(args[1].data));
  CHECK(counter(*f.runner, "x").direct_calls == 1 && counter(*f.runner, "x").staging_copies == 0);
  CHECK(f.resized.size() == 1 && f.resized[0] == 1);

  // Same shapes, same buffers: one provider call, nothing resent, no second shape inference.
  fill(args[0], 20);
  CHECK(f.run(args).ok());
  CHECK(holds_input_plus_one(args[1], 20));
  CHECK(f.s.executes.size() == 2 && !f.s.executes[1].sent_shapes &&
        !f.s.executes[1].sent_addresses);
  CHECK(f.s.infer_calls == 1 && f.s.enters == 1);
  CHECK(f.runner->calls() == 2);
}

TEST(new_shapes_are_inferred_once_and_new_addresses_rebound) {
  Fixture f(one_in_one_out());
  std::vector<IoArg> small = {f.device({2, 4}), f.device({2, 4})};
  std::vector<IoArg> large = {f.device({8, 4}), f.device({8, 4})};
  fill(small[0], 0);
  fill(large[0], 100);
  CHECK(f.run(small).ok() && f.run(large).ok() && f.run(small).ok());
  CHECK(f.s.infer_calls == 2);  // the second [2, 4] came from the runner's cache
  CHECK(f.s.executes.size() == 3);
  CHECK(!f.s.executes[1].sent_shapes && f.s.executes[1].sent_addresses);  // set by inference
  // Cached shapes are not inferred again, so execute itself sets them back.
  CHECK(f.s.executes[2].sent_shapes && f.s.executes[2].sent_addresses);
  CHECK(f.s.context_shapes == (std::vector<Dims>{{2, 4}}));
  CHECK(holds_input_plus_one(large[1], 100) && holds_input_plus_one(small[1], 0));
}

TEST(host_buffers_are_staged_on_a_discrete_gpu_and_bound_where_it_reads_host_memory) {
  Fixture discrete(one_in_one_out(), false);
  std::vector<IoArg> args = {discrete.host({2, 4}), discrete.host({2, 4})};
  fill(args[0], 5);
  CHECK(discrete.run(args).ok());
  CHECK(holds_input_plus_one(args[1], 5));
  const auto& x = counter(*discrete.runner, "x");
  CHECK(x.staged_calls == 1 && x.staging_copies == 1 && x.stage_capacity == 32);
  CHECK(counter(*discrete.runner, "y").staging_copies == 1);
  CHECK(discrete.s.context_addresses[0] != reinterpret_cast<uintptr_t>(args[0].data));
  CHECK(discrete.memory->is_device_pointer(
      reinterpret_cast<const void*>(discrete.s.context_addresses[0])));
  CHECK(discrete.s.unaligned_claims == 0);  // staged for being host memory, not for alignment

  Fixture integrated(one_in_one_out(), true);
  std::vector<IoArg> same = {integrated.host({2, 4}), integrated.host({2, 4})};
  fill(same[0], 5);
  CHECK(integrated.run(same).ok());
  CHECK(holds_input_plus_one(same[1], 5));
  CHECK(counter(*integrated.runner, "x").direct_calls == 1);
  CHECK(integrated.s.context_addresses[0] == reinterpret_cast<uintptr_t>(same[0].data));
}

TEST(unaligned_device_buffers_are_staged_and_logged_once_per_engine) {
  Fixture f(one_in_one_out());
  std::vector<IoArg> args = {f.device({2, 4}, 16), f.device({2, 4}, 64)};
  fill(args[0], 1);
  CHECK(f.run(args).ok() && f.run(args).ok());
  CHECK(holds_input_plus_one(args[1], 1));
  CHECK(f.s.context_addresses[0] % kBindingAlignment == 0);
  CHECK(f.s.context_addresses[1] % kBindingAlignment == 0);
  CHECK(counter(*f.runner, "x").staging_copies == 2 && counter(*f.runner, "y").staged_calls == 2);
  CHECK(f.s.unaligned_claims >= 1);
  // Staging buffers are kept between calls: the second call rebinds nothing.
  CHECK(!f.s.executes[1].sent_addresses);
}

TEST(a_staging_buffer_grows_with_the_input) {
  Fixture f(one_in_one_out());
  std::vector<IoArg> small = {f.host({1, 4}), f.device({1, 4})};
  std::vector<IoArg> large = {f.host({8, 4}), f.device({8, 4})};
  fill(small[0], 0);
  fill(large[0], 0);
  CHECK(f.run(small).ok());
  CHECK(counter(*f.runner, "x").stage_capacity == 16);
  CHECK(f.run(large).ok());
  CHECK(counter(*f.runner, "x").stage_capacity == 128);
  CHECK(holds_input_plus_one(large[1], 0));
}

TEST(a_wrong_argument_count_is_refused_before_the_engine_is_asked) {
  Fixture f(one_in_one_out());
  std::vector<IoArg> args = {f.device({2, 4})};
  Status s = f.run(args);
  CHECK(s.code == Error::InvalidArgument);
  CHECK_CONTAINS(s.reason, "the delegate got 1 arguments; the engine takes 1 inputs and 1 outputs");
  CHECK(f.s.infer_calls == 0 && f.s.executes.empty());
}

TEST(dtypes_must_match_the_engine) {
  Fixture f(one_in_one_out());
  std::vector<IoArg> args = {f.device({2, 4}), f.device({2, 4})};
  args[0].dtype = "int32";
  Status in = f.run(args);
  CHECK(in.code == Error::InvalidArgument);
  CHECK_CONTAINS(in.reason, "input 'x' is int32 but the engine takes float32");
  args[0].dtype = "";  // a caller that does not know the dtype is not refused for it
  args[1].dtype = "float16";
  Status out = f.run(args);
  CHECK_CONTAINS(out.reason, "output 'y' is float16 but the engine writes float32");
  CHECK(f.s.executes.empty());
}

TEST(shapes_outside_the_profile_or_the_engine_are_refused) {
  Fixture f(one_in_one_out());
  std::vector<IoArg> args = {f.device({9, 4}), f.device({9, 4})};
  Status above = f.run(args);
  CHECK(above.code == Error::InvalidArgument);
  CHECK_CONTAINS(above.reason,
                 "input 'x' shape [9, 4] outside optimization profile 0 [[1, 4], [8, 4]]");
  args[0].shape = {0, 4};
  CHECK_CONTAINS(f.run(args).reason, "shape [0, 4] outside optimization profile 0");
  args[0].shape = {2, 4, 1};
  CHECK_CONTAINS(f.run(args).reason, "input 'x' shape [2, 4, 1] does not have the engine's rank 2");

  Script fixed;  // no profile: a fixed dimension is the only bound
  fixed.io = {tensor("x", true, {2, 4}), tensor("y", false, {2, 4})};
  Fixture g(fixed);
  std::vector<IoArg> wrong = {g.device({2, 5}), g.device({2, 5})};
  CHECK_CONTAINS(g.run(wrong).reason, "input 'x' shape [2, 5] does not match the engine's [2, 4]");
  CHECK(f.s.infer_calls == 0 && g.s.infer_calls == 0);
}

TEST(a_null_buffer_that_claims_bytes_is_refused_and_an_empty_one_gets_a_placeholder) {
  Fixture f(one_in_one_out());
  std::vector<IoArg> args = {f.device({2, 4}), f.device({2, 4})};
  args[0].data = nullptr;
  Status s = f.run(args);
  CHECK(s.code == Error::InvalidArgument);
  CHECK_CONTAINS(s.reason, "input 'x' has 32 bytes but no storage");
  CHECK(f.s.executes.empty());

  Script empty_ok = one_in_one_out();
  empty_ok.io[0].profile_min = Dims{0, 4};
  Fixture g(empty_ok);
  IoArg nothing;
  nothing.shape = {0, 4};
  nothing.dtype = "float32";
  std::vector<IoArg> empty = {nothing, nothing};
  CHECK(g.run(empty).ok());
  CHECK(g.s.context_addresses.size() == 2 && g.s.context_addresses[0] != 0);
  CHECK(g.s.context_addresses[0] % kBindingAlignment == 0);
  CHECK(counter(*g.runner, "x").staging_copies == 0);
}

TEST(provider_failures_are_passed_on_and_the_context_is_resent_afterwards) {
  Fixture f(one_in_one_out());
  std::vector<IoArg> args = {f.device({2, 4}), f.device({2, 4})};
  f.s.infer_fails = Status(Error::InvalidArgument, "TensorRT: setInputShape failed");
  Status inferred = f.run(args);
  CHECK(inferred.code == Error::InvalidArgument);
  CHECK_CONTAINS(inferred.reason, "setInputShape failed");
  CHECK(f.s.executes.empty());

  f.s.infer_fails = Status();
  f.s.execute_fails = Status(Error::Internal, "TensorRT: enqueueV3 failed");
  Status executed = f.run(args);
  CHECK(executed.code == Error::Internal);
  CHECK_CONTAINS(executed.reason, "enqueueV3 failed");
  CHECK(f.runner->calls() == 0);  // a failed call is not counted as run

  f.s.execute_fails = Status();
  CHECK(f.run(args).ok());
  // After a failed execute the context's state is unknown: shapes and addresses are resent.
  CHECK(f.s.executes.back().sent_shapes && f.s.executes.back().sent_addresses);
}

// A kernel's sticky fault (here the stand-in put in that state) shows at the stream synchronize
// after the enqueue, and the memory reports its context poisoned: what the service asks after a
// failed execute (ethost.device_fault()).
TEST(a_poisoned_context_fails_the_execute_at_its_synchronize_and_stays_poisoned) {
  Fixture f(one_in_one_out());
  std::vector<IoArg> args = {f.device({2, 4}), f.device({2, 4})};
  CHECK(f.run(args).ok());
  CHECK(f.memory->context_health().ok());
  CHECK(ethost_device::poison_host_memory(f.memory,
                                          "cudaErrorIllegalAddress: an illegal memory "
                                          "access was encountered")
            .ok());
  Status executed = f.run(args);
  CHECK(!executed.ok());
  CHECK_CONTAINS(executed.reason, "an illegal memory access was encountered");
  CHECK_CONTAINS(f.memory->context_health().reason, "cudaErrorIllegalAddress");
  CHECK(!f.memory->allocate(16).ok());  // every later call fails too
  CHECK(f.run(args).reason == executed.reason);
}

TEST(an_engine_giving_the_wrong_number_of_output_shapes_is_an_internal_error) {
  Script s = one_in_one_out();
  s.output_shapes = [](const std::vector<Dims>&) { return std::vector<Dims>{}; };
  Fixture f(s);
  std::vector<IoArg> args = {f.device({2, 4}), f.device({2, 4})};
  Status failed = f.run(args);
  CHECK(failed.code == Error::Internal);
  CHECK_CONTAINS(failed.reason, "the engine provider gave 0 output shapes for an engine with 1");
}

TEST(an_output_that_cannot_take_the_engines_shape_fails_the_call) {
  Fixture f(one_in_one_out());
  f.resize_fails = Status(Error::InvalidArgument, "output 1 cannot take the engine's shape");
  std::vector<IoArg> args = {f.device({2, 4}), f.device({2, 4})};
  Status s = f.run(args);
  CHECK_CONTAINS(s.reason, "cannot take the engine's shape");
  CHECK(f.s.executes.empty());
}

TEST(creating_a_runner_checks_the_blob_against_the_engine) {
  Fixture missing(one_in_one_out(), false, bindings({{"x", true}}));
  CHECK(missing.runner == nullptr && missing.created.code == Error::InvalidProgram);
  CHECK_CONTAINS(missing.created.reason, "the blob names 1 bindings but the engine has 2");
  Fixture wrong_role(one_in_one_out(), false, bindings({{"x", true}, {"y", true}}));
  CHECK_CONTAINS(wrong_role.created.reason, "the blob's input 'y' is not an engine input");
  Fixture unknown(one_in_one_out(), false, bindings({{"x", true}, {"z", false}}));
  CHECK_CONTAINS(unknown.created.reason, "the blob's output 'z' is not an engine output");
  Script shapes = one_in_one_out();
  shapes.io[0].shape_tensor = true;
  Fixture shape_tensor(shapes);
  CHECK(shape_tensor.runner == nullptr && shape_tensor.created.code == Error::InvalidProgram);
  CHECK_CONTAINS(shape_tensor.created.reason, "input 'x' is a shape tensor");

  Script no_context = one_in_one_out();
  no_context.create_context_fails = Status(Error::MemoryAllocationFailed, "out of device memory");
  Fixture f(no_context);
  CHECK(f.runner == nullptr && f.created.code == Error::MemoryAllocationFailed);
  CHECK_CONTAINS(f.created.reason, "out of device memory");
}

TEST(the_arguments_follow_the_blobs_order_not_the_engines) {
  // Engine order y, b, a; the program passes a, b, then y.
  Script s;
  s.io = {tensor("y", false, {4}), tensor("b", true, {4}), tensor("a", true, {4})};
  Fixture f(s, false, bindings({{"a", true}, {"b", true}, {"y", false}}));
  std::vector<IoArg> args = {f.device({4}), f.device({4}), f.device({4})};
  CHECK(f.run(args).ok());
  CHECK(f.s.context_addresses[0] == reinterpret_cast<uintptr_t>(args[2].data));
  CHECK(f.s.context_addresses[1] == reinterpret_cast<uintptr_t>(args[1].data));
  CHECK(f.s.context_addresses[2] == reinterpret_cast<uintptr_t>(args[0].data));
}

TEST(an_in_place_output_may_be_elided_and_must_match_its_input) {
  // cache is updated in place through cache_out; x is a plain input.
  Script s;
  s.io = {tensor("cache", true, {4}), tensor("x", true, {4}), tensor("cache_out", false, {4})};
  BlobMetadata meta = bindings({{"cache", true}, {"x", true}, {"cache_out", false}});
  meta.aliased_io.push_back({"cache_out", "cache", "kv_cache_update"});
  Fixture f(s, false, meta);
  std::vector<IoArg> elided = {f.device({4}), f.device({4})};
  fill(elided[0], 3);
  CHECK(f.run(elided).ok());
  CHECK(holds_input_plus_one(elided[0], 3));  // updated where it lies
  CHECK(f.s.context_addresses[2] == f.s.context_addresses[0]);
  CHECK(f.resized.empty());  // nothing to resize: the elided output has no argument

  std::vector<IoArg> too_many = {f.device({4}), f.device({4}), f.device({4}), f.device({4})};
  CHECK_CONTAINS(f.run(too_many).reason, "(1 of them may be elided in-place outputs)");

  s.output_shapes = [](const std::vector<Dims>&) { return std::vector<Dims>{{2}}; };
  Fixture g(s, false, meta);
  std::vector<IoArg> separate = {g.device({4}), g.device({4}), g.device({4})};
  Status mismatch = g.run(separate);
  CHECK(mismatch.code == Error::InvalidArgument);
  CHECK_CONTAINS(mismatch.reason, "in-place output 'cache_out' is 8 bytes but its input is 16");
}

TEST(live_runners_report_their_counters_until_destroyed) {
  auto count_labelled = [] {
    size_t n = 0;
    for (const auto& r : all_runner_counters()) n += r.label == "forward#test";
    return n;
  };
  size_t before = count_labelled();
  {
    Fixture f(one_in_one_out());
    f.runner->set_origin({"model-a", "forward", 2});
    CHECK(count_labelled() == before + 1);
    bool found = false;
    for (const auto& r : all_runner_counters()) {
      if (r.label == "forward#test" && r.origin.owner == "model-a") {
        found = r.origin.ordinal == 2 && r.bindings.size() == 2;
      }
    }
    CHECK(found);
  }
  CHECK(count_labelled() == before);
}

// make_runner: the delegate's init, from blob bytes to a runner, through the installed provider.

namespace {

const char* kBlobMeta =
    R"({"io_bindings": [{"name": "x", "is_input": true}, {"name": "y", "is_input": false}])";

}  // namespace

TEST(make_runner_deserializes_the_inline_plan_and_releases_the_bytes_once) {
  Script s = one_in_one_out();
  auto provider = std::make_shared<FakeProvider>(&s);
  set_engine_provider(provider);
  use_memory(make_host_memory(false));
  auto bytes = ethost_test::blob(std::string(kBlobMeta) + "}", "PLAN-BYTES");
  int released = 0;
  auto runner = make_runner(
      bytes.data(), bytes.size(), [](const std::string&) -> Outcome<Bytes> { return Bytes{}; },
      "forward#0", [&] { ++released; });
  CHECK(runner.ok() && released == 1);
  CHECK(provider->plans.size() == 1 && provider->plans[0] == "PLAN-BYTES");
  CHECK(provider->devices[0] == 0);
  CHECK(runner.ok() && runner.value()->label() == "forward#0");
  CHECK(runner.ok() && std::string(runner.value()->memory_kind()) == "host");
  set_engine_provider(nullptr);
  use_memory(nullptr);
}

TEST(make_runner_finds_an_external_plan_by_its_key) {
  Script s = one_in_one_out();
  auto provider = std::make_shared<FakeProvider>(&s);
  set_engine_provider(provider);
  use_memory(make_host_memory(false));
  auto bytes = ethost_test::blob(std::string(kBlobMeta) + R"(, "engine_key": "k_engine"})", "");
  std::string stored = "EXTERNAL-PLAN";
  auto lookup = [&](const std::string& key) -> Outcome<Bytes> {
    if (key != "k_engine") return Status(Error::InvalidExternalData, "no entry");
    return Bytes{reinterpret_cast<const uint8_t*>(stored.data()), stored.size()};
  };
  int released = 0;
  auto runner = make_runner(bytes.data(), bytes.size(), lookup, "f#1", [&] { ++released; });
  CHECK(runner.ok() && provider->plans.back() == "EXTERNAL-PLAN" && released == 1);

  auto no_data = [](const std::string&) -> Outcome<Bytes> {
    return Status(Error::NotFound, "no named data");
  };
  auto without = make_runner(bytes.data(), bytes.size(), no_data, "f#2", [] {});
  CHECK(!without.ok() && without.status().code == Error::InvalidExternalData);
  CHECK_CONTAINS(without.status().reason,
                 "the engine is stored under 'k_engine' but the program was loaded without its "
                 ".ptd data file");
  auto other = [](const std::string&) -> Outcome<Bytes> {
    return Status(Error::InvalidExternalData, "no entry");
  };
  auto missing = make_runner(bytes.data(), bytes.size(), other, "f#3", [] {});
  CHECK(!missing.ok());
  CHECK_CONTAINS(missing.status().reason, "the program's data has no entry 'k_engine'");
  set_engine_provider(nullptr);
  use_memory(nullptr);
}

TEST(make_runner_passes_provider_failures_on) {
  use_memory(make_host_memory(false));
  auto bytes = ethost_test::blob(std::string(kBlobMeta) + "}", "PLAN");
  auto none = [](const std::string&) -> Outcome<Bytes> { return Bytes{}; };

  set_engine_provider(nullptr);
  int released = 0;
  auto uninstalled = make_runner(bytes.data(), bytes.size(), none, "f", [&] { ++released; });
  CHECK(!uninstalled.ok() && uninstalled.status().code == Error::InvalidState);
  CHECK_CONTAINS(uninstalled.status().reason, "no engine provider is installed");
  CHECK(released == 1);  // the bytes go whatever the outcome

  Script s = one_in_one_out();
  auto provider = std::make_shared<FakeProvider>(&s);
  provider->fails = Status(Error::DelegateInvalidCompatibility, "plan built for another GPU");
  set_engine_provider(provider);
  auto refused = make_runner(bytes.data(), bytes.size(), none, "f", [&] { ++released; });
  CHECK(!refused.ok() && refused.status().code == Error::DelegateInvalidCompatibility);
  CHECK_CONTAINS(refused.status().reason, "plan built for another GPU");
  CHECK(released == 2);

  auto garbage = std::vector<uint8_t>(8, 0);
  auto unparsed = make_runner(garbage.data(), garbage.size(), none, "f", [] {});
  CHECK(!unparsed.ok() && unparsed.status().code == Error::InvalidProgram);
  set_engine_provider(nullptr);
  use_memory(nullptr);
}
