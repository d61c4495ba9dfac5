// The lane's dynamic batching (batcher.h) over a fake instance that keeps the batch dimension:
// batches up to max_batch rows, cut to a preferred size, each request its own rows in its room;
// a request the kernels refuse fails alone while its batch-mates are answered; a request taken
// out while it waits, and those handed back to Python when the method stops merging; inputs in
// device memory (CUDA regions; here the host stand-in) gathered there.
#include "batcher.h"
#include "check.h"
#include "device_memory.h"
#include "method_gate.h"
#include "routes.h"
#include "served_log.h"
#include "wire.h"
#include "workers.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

using namespace ethost;
using namespace ethost::lane;
using executorch::aten::ScalarType;

namespace {

constexpr int kWidth = 4;  // floats per row

// Doubles its [rows, kWidth] FP32 input into its output's destination; refuses (InvalidArgument,
// as a kernel refuses a value) any batch holding a negative value.
class RowsRunnable final : public Runnable {
 public:
  bool try_acquire() override { return !busy.exchange(true); }
  void release() override { busy.store(false); }
  Outcome<std::vector<OutputBuffer>> run(
      std::vector<InputBinding>& inputs,
      const std::vector<OutputDestination>* destinations) override {
    const InputBinding& in = inputs[0];
    size_t rows = static_cast<size_t>(in.sizes[0]);
    {
      std::lock_guard<std::mutex> lock(mutex);
      batches.push_back(rows);
      on_device = in.on_device;
      input = in.data;
    }
    const float* x = static_cast<const float*>(in.data);
    for (size_t i = 0; i < rows * kWidth; ++i) {
      if (x[i] < 0) return Status(Error::InvalidArgument, "index out of range");
    }
    float* y = static_cast<float*>((*destinations)[0].data);
    for (size_t i = 0; i < rows * kWidth; ++i) y[i] = 2 * x[i];
    std::vector<OutputBuffer> out(1);
    out[0].dtype = ScalarType::Float;
    out[0].shape = {drop_rows ? 1 : rows, static_cast<size_t>(kWidth)};
    out[0].in_destination = true;
    return out;
  }
  uint64_t last_run_ns() const override { return 1000; }

  std::vector<size_t> taken() {
    std::lock_guard<std::mutex> lock(mutex);
    return batches;
  }

  std::atomic<bool> busy{false};
  bool drop_rows = false;  // a program that does not keep the batch dimension
  bool on_device = false;  // the last batch's input, as bound
  const void* input = nullptr;
  std::mutex mutex;
  std::vector<size_t> batches;
};

// What the batcher tells a front's link.
class Recorder final : public Replies {
 public:
  void answered(const std::string& framed) override { add(answers, framed); }
  void declined(std::string message) override { add(declines, message); }
  void failed(std::string message, Status why) override {
    std::lock_guard<std::mutex> lock(mutex);
    failures.push_back({message, why});
  }
  void want_fold() override {}
  void finished() override {
    std::lock_guard<std::mutex> lock(mutex);
    ++done;
    changed.notify_all();
  }
  void waiting(uint64_t, std::shared_ptr<const Route>, uint64_t,
               std::shared_ptr<const std::string>) override {}
  void waited(uint64_t) override {}

  bool wait_for(size_t count) {
    std::unique_lock<std::mutex> lock(mutex);
    return changed.wait_for(lock, std::chrono::seconds(5), [&] { return done >= count; });
  }

  std::mutex mutex;
  std::condition_variable changed;
  size_t done = 0;
  std::vector<std::string> answers, declines;
  std::vector<std::pair<std::string, Status>> failures;

 private:
  void add(std::vector<std::string>& into, const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex);
    into.push_back(what);
  }
};

struct Fixture {
  explicit Fixture(BatchPolicy policy) : arena(64 * 1024, 0), log(1000), workers(2) {
    instance = std::make_shared<RowsRunnable>();
    gate = std::make_shared<MethodGate>(std::vector<std::shared_ptr<Runnable>>{instance});
    auto made = std::make_shared<Route>();
    made->id = 3;
    made->model = "m";
    made->version = "1";
    made->method = "forward";
    made->gate = gate;
    made->inputs = {ScalarType::Float};
    made->max_batch = policy.max_batch;
    made->most_bytes = {static_cast<uint64_t>(policy.max_batch) * kWidth * sizeof(float)};
    made->row_bytes = {kWidth * sizeof(float)};
    made->on_workers = true;
    route = made;
    batcher = std::make_unique<Batcher>(gate, policy, workers, log);
  }

  // Request `id` of `rows` rows of `value`, its input at 1024 * id in the arena and its room
  // after it.
  std::unique_ptr<BatchEntry> entry(uint64_t id, int64_t rows, float value) {
    auto made = std::make_unique<BatchEntry>();
    made->route = route;
    made->replies = &replies;
    made->message = std::make_shared<std::string>("request " + std::to_string(id));
    made->request_id = id;
    made->waiter = gate->lane_waiter_id();
    made->rows = rows;
    uint64_t at = 1024 * id;
    auto* x = reinterpret_cast<float*>(arena.data() + at);
    for (int64_t i = 0; i < rows * kWidth; ++i) x[i] = value;
    InputBinding binding;
    binding.is_tensor = true;
    binding.dtype = ScalarType::Float;
    binding.ndim = 2;
    binding.sizes[0] = static_cast<int32_t>(rows);
    binding.sizes[1] = kWidth;
    binding.data = x;
    made->bindings = {binding};
    made->input_bytes = {static_cast<uint64_t>(rows) * kWidth * sizeof(float)};
    made->arena = arena.data();
    made->room_offset = at + 512;
    made->room_size = 512;
    BatchOutput output;
    output.wire.index = 0;
    made->outputs = {output};
    return made;
  }

  // The answer to `id`: its output's rows, read where the answer says they are.
  std::vector<float> answer_of(uint64_t id) {
    std::lock_guard<std::mutex> lock(replies.mutex);
    for (const std::string& framed : replies.answers) {
      uint64_t request_id, offset;
      uint32_t ndim;
      int64_t rows;
      std::memcpy(&request_id, framed.data() + 12, 8);
      if (request_id != id) continue;
      std::memcpy(&ndim, framed.data() + 24, 4);
      std::memcpy(&offset, framed.data() + 28, 8);
      std::memcpy(&rows, framed.data() + 36, 8);
      CHECK(ndim == 2);
      CHECK(offset >= 1024 * id + 512 && offset % 256 == 0);
      const auto* y = reinterpret_cast<const float*>(arena.data() + offset);
      return std::vector<float>(y, y + rows * kWidth);
    }
    return {};
  }

  std::vector<uint8_t> arena;
  ServedLog log;
  Workers workers;
  Recorder replies;
  std::shared_ptr<RowsRunnable> instance;
  std::shared_ptr<MethodGate> gate;
  std::shared_ptr<const Route> route;
  std::unique_ptr<Batcher> batcher;
};

}  // namespace

TEST(requests_merge_up_to_max_batch_and_each_gets_its_own_rows) {
  Fixture f(BatchPolicy{4, 30'000'000, {}});
  Runnable* held = f.gate->claim();  // every request queues before the first batch forms
  for (uint64_t id = 1; id <= 6; ++id) {
    CHECK(f.batcher->submit(f.entry(id, 1, static_cast<float>(id))));
  }
  f.gate->release(held);
  CHECK(f.replies.wait_for(6));
  CHECK((f.instance->taken() == std::vector<size_t>{4, 2}));  // full, then after the delay
  for (uint64_t id = 1; id <= 6; ++id) {
    CHECK((f.answer_of(id) == std::vector<float>(kWidth, 2.0f * id)));
  }
  std::vector<ServedRecord> records = f.log.drain();
  CHECK(records.size() == 6);
  uint32_t executes = 0;
  for (const ServedRecord& record : records) executes += record.executes;
  CHECK(executes == 2);
}

TEST(a_batch_is_cut_to_the_largest_preferred_size_it_reaches) {
  Fixture f(BatchPolicy{8, 0, {2}});
  Runnable* held = f.gate->claim();
  for (uint64_t id = 1; id <= 3; ++id) CHECK(f.batcher->submit(f.entry(id, 1, 1.0f)));
  f.gate->release(held);
  CHECK(f.replies.wait_for(3));
  CHECK((f.instance->taken() == std::vector<size_t>{2, 1}));
}

TEST(a_request_the_kernels_refuse_fails_alone_and_its_batch_mates_are_answered) {
  Fixture f(BatchPolicy{8, 0, {}});
  Runnable* held = f.gate->claim();
  for (uint64_t id = 1; id <= 4; ++id) {
    CHECK(f.batcher->submit(f.entry(id, 1, id == 3 ? -1.0f : 1.0f)));
  }
  f.gate->release(held);
  CHECK(f.replies.wait_for(4));
  CHECK(f.replies.answers.size() == 3);
  CHECK(f.replies.failures.size() == 1);
  CHECK(f.replies.failures[0].first == "request 3");
  CHECK(f.replies.failures[0].second.code == Error::InvalidArgument);
  // 4 refused, then halves: [1, 2] ran, [3, 4] refused, then [3] refused and [4] ran.
  CHECK((f.instance->taken() == std::vector<size_t>{4, 2, 2, 1, 1}));
  CHECK((f.answer_of(4) == std::vector<float>(kWidth, 2.0f)));
}

TEST(a_request_taken_out_is_never_run_and_stop_hands_the_rest_to_python) {
  Fixture f(BatchPolicy{8, 0, {}});
  Runnable* held = f.gate->claim();
  auto first = f.entry(1, 1, 1.0f);
  uint64_t waiter = first->waiter;
  CHECK(f.batcher->submit(std::move(first)));
  CHECK(f.batcher->submit(f.entry(2, 2, 1.0f)));
  CHECK(f.batcher->forget(waiter));
  CHECK(!f.batcher->forget(waiter));
  CHECK(f.batcher->depth() == 1);
  f.batcher->stop();
  CHECK(f.replies.declines == std::vector<std::string>{"request 2"});
  CHECK(!f.batcher->submit(f.entry(3, 1, 1.0f)));  // stopped: the caller declines it
  f.gate->release(held);
  CHECK(f.instance->taken().empty());
}

TEST(an_output_that_loses_the_batch_dimension_fails_every_request_of_the_batch) {
  Fixture f(BatchPolicy{8, 0, {}});
  f.instance->drop_rows = true;
  Runnable* held = f.gate->claim();
  CHECK(f.batcher->submit(f.entry(1, 1, 1.0f)));
  CHECK(f.batcher->submit(f.entry(2, 2, 1.0f)));
  f.gate->release(held);
  CHECK(f.replies.wait_for(2));
  CHECK(f.replies.answers.empty());
  CHECK(f.replies.failures.size() == 2);
  for (const auto& [message, why] : f.replies.failures) {
    CHECK(why.reason.find("not 3 rows: the program does not keep the batch dimension") !=
          std::string::npos);
  }
  CHECK(f.log.drain().empty());  // Python counts the failures it answers
}

TEST(inputs_in_device_memory_are_gathered_there_and_bound_on_the_device) {
  auto memory = ethost_device::make_host_memory(false);
  ethost_device::use_memory(memory);
  {
    Fixture f(BatchPolicy{8, 0, {}});
    auto* region = static_cast<float*>(memory->allocate(1024).take());
    Runnable* held = f.gate->claim();
    for (uint64_t id = 1; id <= 2; ++id) {
      auto entry = f.entry(id, 1, 0.0f);
      float* x = region + (id - 1) * 64;
      for (int i = 0; i < kWidth; ++i) x[i] = static_cast<float>(id);
      entry->bindings[0].data = x;
      entry->bindings[0].on_device = true;
      CHECK(f.batcher->submit(std::move(entry)));
    }
    f.gate->release(held);
    CHECK(f.replies.wait_for(2));
    CHECK((f.instance->taken() == std::vector<size_t>{2}));
    CHECK(f.instance->on_device);
    CHECK(memory->is_device_pointer(f.instance->input));
    CHECK((f.answer_of(1) == std::vector<float>(kWidth, 2.0f)));
    CHECK((f.answer_of(2) == std::vector<float>(kWidth, 4.0f)));
    memory->release(region);
  }
  ethost_device::use_memory(nullptr);
}
