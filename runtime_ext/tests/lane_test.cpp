// The engine's native lane without a program: its messages, the method gate, serving a request
// on a fake instance (bound where the inputs lie, outputs in the room, the answer and the
// served record), every reason to decline, the inbox and a front's link over a socketpair.
#include "check.h"
#include "fake_runnable.h"
#include "front_link.h"
#include "inbox.h"
#include "lane.h"
#include "method_gate.h"
#include "routes.h"
#include "served_log.h"
#include "wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace ethost;
using namespace ethost::lane;
using ethost_test::FakeRunnable;
using executorch::aten::ScalarType;

namespace {

struct Fixture {
  Fixture() : arena_bytes(64 * 1024, 0), log(1000), lane(log, nullptr) {
    arena = ArenaView{arena_bytes.data(), arena_bytes.size()};
    instance = std::make_shared<FakeRunnable>();
    gate = std::make_shared<MethodGate>(std::vector<std::shared_ptr<Runnable>>{instance});
    gate->observe(2000);  // one short execute seen: open for the lane
    auto route = std::make_shared<Route>();
    route->id = 7;
    route->model = "tiny";
    route->version = "3";
    route->method = "forward";
    route->gate = gate;
    route->inputs = {ScalarType::Float};
    route->most_bytes = {16};
    route->on_workers = true;
    table.generation = 5;
    table.inline_ns = 100000;
    table.routes[7] = route;
  }

  // A request for [2, 2] floats at offset 256, room for the outputs at 1024.
  InferRequest request() const {
    InferRequest r;
    r.route = 7;
    r.request_id = 42;
    r.generation = 5;
    r.room_offset = 1024;
    r.room_size = 512;
    r.outputs = 1;
    r.input_count = 1;
    r.inputs[0].offset = 256;
    r.inputs[0].ndim = 2;
    r.inputs[0].dims[0] = 2;
    r.inputs[0].dims[1] = 2;
    return r;
  }

  Lane::Result serve(const InferRequest& r, std::string& out, Replies* replies = nullptr) {
    std::string message = write_request(r);
    bool fold = false;
    auto current = std::make_shared<RouteTable>(table);
    return lane.serve(current, reinterpret_cast<const uint8_t*>(message.data()), message.size(),
                      arena, 2, out, fold, failure, replies);
  }

  bool declines(const InferRequest& r) {
    std::string out;
    return serve(r, out) == Lane::Result::Declined && out.empty();
  }

  std::vector<uint8_t> arena_bytes;
  ArenaView arena;
  ServedLog log;
  Lane lane;
  std::shared_ptr<FakeRunnable> instance;
  std::shared_ptr<MethodGate> gate;
  RouteTable table;
  Status failure;  // the last request's, when it ran and failed
};

// The answer appended to `out` (length prefix first), as the front reads it.
struct Answer {
  uint64_t request_id = 0;
  std::vector<WireOutput> outputs;
};

Answer read_answer(const std::string& out) {
  Answer answer;
  CHECK(out.size() >= 20);
  if (out.size() < 20) return answer;
  const char* p = out.data();
  uint32_t length;
  std::memcpy(&length, p, 4);
  CHECK(length + 4 == out.size());
  CHECK(static_cast<uint8_t>(p[4]) == kDoneTag);
  size_t count = static_cast<uint8_t>(p[5]);
  std::memcpy(&answer.request_id, p + 12, 8);
  size_t at = 20;
  for (size_t i = 0; i < count; ++i) {
    WireOutput o;
    std::memcpy(&o.index, p + at, 4);
    std::memcpy(&o.ndim, p + at + 4, 4);
    std::memcpy(&o.offset, p + at + 8, 8);
    at += 16;
    for (size_t d = 0; d < o.ndim; ++d, at += 8) std::memcpy(&o.dims[d], p + at, 8);
    answer.outputs.push_back(o);
  }
  CHECK(at == out.size());
  return answer;
}

}  // namespace

TEST(a_request_survives_its_wire_layout) {
  Fixture f;
  InferRequest r = f.request();
  r.outputs = 0b101;
  std::string message = write_request(r);
  CHECK(message.size() == 48 + 16 + 16);
  Outcome<InferRequest> read =
      read_request(reinterpret_cast<const uint8_t*>(message.data()), message.size());
  CHECK(read.ok());
  InferRequest back = read.take();
  CHECK(back.route == 7 && back.request_id == 42 && back.generation == 5);
  CHECK(back.room_offset == 1024 && back.room_size == 512 && back.outputs == 0b101);
  CHECK(back.input_count == 1 && back.inputs[0].offset == 256 && back.inputs[0].ndim == 2);
  CHECK(back.inputs[0].dims[0] == 2 && back.inputs[0].dims[1] == 2);
}

TEST(malformed_requests_are_refused_by_the_reader) {
  Fixture f;
  std::string message = write_request(f.request());
  auto read = [](const std::string& m) {
    return read_request(reinterpret_cast<const uint8_t*>(m.data()), m.size());
  };
  CHECK(!read(message.substr(0, message.size() - 1)).ok());  // cut short
  CHECK(!read(message + "x").ok());                          // longer than its fields
  std::string marshal = message;
  marshal[0] = ')';
  CHECK(!read(marshal).ok());  // not a lane request
  std::string many = message;
  many[1] = static_cast<char>(kMaxInputs + 1);
  CHECK_CONTAINS(read(many).status().reason, "inputs");
  std::string deep = message;
  uint32_t ndim = kMaxDims + 1;
  std::memcpy(&deep[48 + 8], &ndim, 4);
  CHECK_CONTAINS(read(deep).status().reason, "dimensions");
}

TEST(the_gate_hands_out_each_instance_once) {
  auto a = std::make_shared<FakeRunnable>(), b = std::make_shared<FakeRunnable>();
  MethodGate gate({a, b});
  Runnable* first = gate.claim();
  Runnable* second = gate.claim();
  CHECK(first != nullptr && second != nullptr && first != second);
  CHECK(gate.claim() == nullptr);
  second->release();
  CHECK(gate.claim() == second);
}

TEST(waiters_get_instances_in_their_order_as_they_are_released_and_none_is_passed) {
  auto only = std::make_shared<FakeRunnable>();
  MethodGate gate({only});
  std::vector<int> got;
  Runnable* first = gate.claim();
  CHECK(first == only.get());
  gate.claim_or_wait([&](Runnable* instance) { got.push_back(instance != nullptr ? 1 : -1); });
  gate.claim_or_wait([&](Runnable* instance) { got.push_back(instance != nullptr ? 2 : -2); }, 7);
  CHECK(got.empty() && gate.waiters() == 2);
  gate.release(first);  // handed on, still claimed
  CHECK(got == std::vector<int>{1} && only->busy.load());
  CHECK(gate.claim() == nullptr);  // a newcomer does not pass the one queued
  gate.release(only.get());
  CHECK((got == std::vector<int>{1, 2}) && only->busy.load());
  gate.release(only.get());
  CHECK(!only->busy.load() && gate.waiters() == 0);
}

TEST(a_waiter_that_gives_up_leaves_the_queue_unless_it_was_served) {
  auto only = std::make_shared<FakeRunnable>();
  MethodGate gate({only});
  Runnable* held = gate.claim();
  int called = 0;
  gate.claim_or_wait([&](Runnable*) { ++called; }, 5);
  gate.claim_or_wait([&](Runnable*) { ++called; }, 6);
  CHECK(gate.forget(5) && gate.waiters() == 1);
  gate.release(held);  // to waiter 6
  CHECK(called == 1 && !gate.forget(6) && gate.waiters() == 0);
  CHECK(gate.index_of(held) == 0 && gate.instance(0) == held);
}

TEST(closing_the_gate_declines_the_lanes_waiters_and_serves_what_python_admitted) {
  auto only = std::make_shared<FakeRunnable>();
  MethodGate gate({only});
  Runnable* held = gate.claim();
  bool declined = false, python_served = false;
  gate.claim_or_wait([&](Runnable* instance) { declined = instance == nullptr; });
  gate.claim_or_wait([&](Runnable* instance) { python_served = instance != nullptr; }, 3);
  gate.close();
  CHECK(declined && gate.waiters() == 1 && !python_served);
  gate.release(held);
  CHECK(python_served && only->busy.load());
  gate.release(held);
  CHECK(!only->busy.load());
  declined = false;
  gate.claim_or_wait([&](Runnable* instance) { declined = instance == nullptr; });
  CHECK(declined);
}

TEST(the_gate_calls_executes_short_from_what_it_saw_ignoring_one_preemption) {
  MethodGate gate({std::make_shared<FakeRunnable>()});
  CHECK(!gate.open_for_lane());  // nothing measured yet: Python runs the first
  for (int i = 0; i < 3; ++i) gate.observe(2000);
  CHECK(gate.open_for_lane() && gate.short_for_lane(100000));
  gate.observe(5000000);  // preempted once: the shorter of the last two counts
  CHECK(gate.short_for_lane(100000));
  gate.observe(5000000);  // and again: it is slow now
  CHECK(gate.open_for_lane() && !gate.short_for_lane(100000));
}

TEST(the_gate_closes_for_the_lane_once_closed) {
  MethodGate gate({std::make_shared<FakeRunnable>()});
  gate.observe(1000);
  CHECK(gate.open_for_lane());
  gate.close();
  CHECK(!gate.open_for_lane());
}

TEST(a_request_is_bound_where_it_lies_and_answered_from_its_room) {
  Fixture f;
  std::string out;
  CHECK(f.serve(f.request(), out) == Lane::Result::Served);
  CHECK(f.instance->runs == 1);
  CHECK(!f.instance->busy.load());  // the claim is given back
  const InputBinding& in = f.instance->bound.at(0);
  CHECK(in.data == f.arena_bytes.data() + 256);
  CHECK(in.ndim == 2 && in.sizes[0] == 2 && in.sizes[1] == 2);
  CHECK(in.strides[0] == 2 && in.strides[1] == 1 && in.dtype == ScalarType::Float);
  Answer answer = read_answer(out);
  CHECK(answer.request_id == 42);
  CHECK(answer.outputs.size() == 1);
  CHECK(answer.outputs[0].index == 0 && answer.outputs[0].offset == 1024);
  CHECK(answer.outputs[0].ndim == 1 && answer.outputs[0].dims[0] == 4);
  CHECK(f.arena_bytes[1024] == 0x40);  // written by the execute, in the room
  std::vector<ServedRecord> served = f.log.drain();
  CHECK(served.size() == 1);
  CHECK(served[0].route->model == "tiny" && served[0].route->version == "3");
  CHECK(served[0].front == 2 && served[0].rows == 1);
  CHECK(served[0].total_ns >= served[0].infer_ns);
}

TEST(outputs_asked_for_are_laid_out_in_the_methods_order_aligned) {
  Fixture f;
  f.instance->outputs = 3;
  auto route = std::make_shared<Route>(*f.table.routes[7]);
  route->most_bytes = {16, 300, 16};
  f.table.routes[7] = route;
  InferRequest r = f.request();
  r.room_size = 1024;
  r.outputs = 0b110;  // the second and third
  std::string out;
  CHECK(f.serve(r, out) == Lane::Result::Served);
  Answer answer = read_answer(out);
  CHECK(answer.outputs.size() == 2);
  CHECK(answer.outputs[0].index == 1 && answer.outputs[0].offset == 1024);
  CHECK(answer.outputs[1].index == 2 && answer.outputs[1].offset == 1024 + 512);
}

TEST(the_lane_declines_what_it_cannot_run_at_once) {
  Fixture f;
  InferRequest r = f.request();
  r.generation = 4;  // checked against another table
  CHECK(f.declines(r));
  r = f.request();
  r.route = 8;  // not served by the lane
  CHECK(f.declines(r));
  r = f.request();
  r.input_count = 0;
  CHECK(f.declines(r));
  f.instance->busy = true;  // no free instance, and somebody queued for the next
  f.gate->claim_or_wait([](Runnable*) {}, 9);
  CHECK(f.declines(f.request()));
  CHECK(f.gate->forget(9));
  CHECK(f.declines(f.request()));  // no free instance
  f.instance->busy = false;
  CHECK(f.instance->runs == 0);
  f.gate->close();
  CHECK(f.declines(f.request()));
}

TEST(the_lane_declines_what_lies_outside_the_arena_or_its_room) {
  Fixture f;
  InferRequest r = f.request();
  r.inputs[0].offset = f.arena.size - 8;  // 16 bytes do not fit
  CHECK(f.declines(r));
  r = f.request();
  r.inputs[0].offset = 300;  // not on a 256-byte boundary
  CHECK(f.declines(r));
  r = f.request();
  r.inputs[0].dims[0] = -1;
  CHECK(f.declines(r));
  r = f.request();
  r.inputs[0].dims[0] = int64_t{1} << 40;
  CHECK(f.declines(r));
  r = f.request();
  r.room_size = 8;  // the output's 16 bytes do not fit
  CHECK(f.declines(r));
  r = f.request();
  r.room_offset = f.arena.size;
  r.room_size = 512;
  CHECK(f.declines(r));
  r = f.request();
  r.outputs = 0b10;  // an output the method does not have
  CHECK(f.declines(r));
  r = f.request();
  r.outputs = 0;
  CHECK(f.declines(r));
  CHECK(f.instance->runs == 0);
}

TEST(an_output_without_a_known_bound_is_left_to_python) {
  Fixture f;
  auto route = std::make_shared<Route>(*f.table.routes[7]);
  route->most_bytes = {0};
  f.table.routes[7] = route;
  CHECK(f.declines(f.request()));
  CHECK(f.instance->runs == 0);
}

TEST(a_request_that_ran_and_failed_is_answered_as_failed_never_declined) {
  Fixture f;
  f.instance->fail = true;
  std::string out;
  CHECK(f.serve(f.request(), out) == Lane::Result::Failed && out.empty());
  CHECK(f.instance->runs == 1);
  CHECK(!f.failure.ok() && f.failure.reason == "kernel failed");
  CHECK(!f.instance->busy.load());
  CHECK(f.log.size() == 0);
  f.instance->fail = false;
  f.instance->leave_in_planned = true;  // an output the host could not write in its room
  CHECK(f.serve(f.request(), out) == Lane::Result::Failed && out.empty());
  CHECK(f.instance->runs == 2 && f.failure.code == executorch::runtime::Error::Internal);
  CHECK(f.log.size() == 0);
}

TEST(a_batched_request_counts_its_rows_and_needs_the_same_rows_on_every_input) {
  Fixture f;
  auto route = std::make_shared<Route>(*f.table.routes[7]);
  route->max_batch = 4;
  route->inputs = {ScalarType::Float, ScalarType::Float};
  f.table.routes[7] = route;
  InferRequest r = f.request();
  r.input_count = 2;
  r.inputs[1] = r.inputs[0];
  r.inputs[1].offset = 512;
  std::string out;
  CHECK(f.serve(r, out) == Lane::Result::Served);
  CHECK(f.log.drain().at(0).rows == 2);
  r.inputs[1].dims[0] = 3;
  CHECK(f.declines(r));
  r.inputs[1].dims[0] = 2;
  r.inputs[0].dims[0] = r.inputs[1].dims[0] = 5;  // over max_batch
  CHECK(f.declines(r));
}

namespace {

// Records what the lane's workers report, for tests without a link.
struct Recorder : Replies {
  void answered(const std::string& framed) override {
    std::lock_guard<std::mutex> lock(mutex);
    answers.push_back(framed);
  }
  void declined(std::string message) override {
    std::lock_guard<std::mutex> lock(mutex);
    refused.push_back(std::move(message));
  }
  void failed(std::string message, Status why) override {
    std::lock_guard<std::mutex> lock(mutex);
    failures.emplace_back(std::move(message), std::move(why));
  }
  void want_fold() override {}
  void finished() override {
    std::lock_guard<std::mutex> lock(mutex);
    ++done;
  }
  void waiting(uint64_t, std::shared_ptr<const Route>, uint64_t,
               std::shared_ptr<const std::string>) override {}
  void waited(uint64_t) override {}
  int finished_count() {
    std::lock_guard<std::mutex> lock(mutex);
    return done;
  }
  std::mutex mutex;
  std::vector<std::string> answers, refused;
  std::vector<std::pair<std::string, Status>> failures;
  int done = 0;
};

bool wait_until(Recorder& recorder, int count) {
  for (int i = 0; i < 200 && recorder.finished_count() < count; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return recorder.finished_count() == count;
}

// The fixture's request served through a lane with workers, its replies recorded, as a front's
// link would serve it.
struct WithReplies {
  explicit WithReplies(Fixture& fixture)
      : f(fixture),
        message(write_request(fixture.request())),
        table(std::make_shared<RouteTable>(fixture.table)) {}

  Lane::Result serve(Lane& lane) {
    return lane.serve(table, reinterpret_cast<const uint8_t*>(message.data()), message.size(),
                      f.arena, 2, out, fold, failure, &recorder);
  }

  Fixture& f;
  Recorder recorder;
  std::string message;
  std::shared_ptr<RouteTable> table;
  std::string out;
  bool fold = false;
  Status failure;
};

}  // namespace

TEST(a_long_execute_runs_on_a_worker_and_answers_through_the_replies) {
  Fixture f;
  Workers workers(2);
  Lane lane(f.log, &workers);
  f.gate->observe(5000000);
  f.gate->observe(5000000);  // recent executes took 5 ms: not for the link thread
  WithReplies r(f);
  CHECK(r.serve(lane) == Lane::Result::Queued);
  CHECK(r.out.empty());
  CHECK(wait_until(r.recorder, 1));
  CHECK(r.recorder.answers.size() == 1 && read_answer(r.recorder.answers[0]).request_id == 42);
  CHECK(f.log.size() == 1 && !f.instance->busy.load());
  // One that fails on the worker comes back whole with why, for Python to answer (not run).
  f.instance->fail = true;
  CHECK(r.serve(lane) == Lane::Result::Queued);
  CHECK(wait_until(r.recorder, 2));
  CHECK(r.recorder.refused.empty() && r.recorder.failures.size() == 1);
  CHECK(r.recorder.failures[0].first == r.message && !r.recorder.failures[0].second.ok());
  CHECK(f.instance->runs == 2);
  // Every instance busy: it waits for the next one freed, and runs then.
  f.instance->fail = false;
  f.instance->busy = true;
  CHECK(r.serve(lane) == Lane::Result::Queued);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(r.recorder.finished_count() == 2 && f.gate->waiters() == 1);
  f.gate->release(f.instance.get());
  CHECK(wait_until(r.recorder, 3));
  CHECK(r.recorder.answers.size() == 2 && !f.instance->busy.load());
  // Without workers, a long execute is Python's; likewise for a method whose queue is bounded.
  CHECK(f.declines(f.request()));
  auto bounded = std::make_shared<Route>(*f.table.routes[7]);
  bounded->on_workers = false;
  r.table->routes[7] = bounded;
  CHECK(r.serve(lane) == Lane::Result::Declined);
}

TEST(a_short_execute_with_every_instance_taken_waits_in_the_gates_queue_not_in_pythons) {
  Fixture f;
  Workers workers(1);
  Lane lane(f.log, &workers);
  f.gate->observe(1000);
  f.gate->observe(1000);  // microseconds: run on the link thread when an instance is free
  WithReplies r(f);
  CHECK(f.instance->try_acquire());            // the only instance busy
  f.gate->claim_or_wait([](Runnable*) {}, 9);  // and somebody (Python) queued for it first
  CHECK(r.serve(lane) == Lane::Result::Queued);
  CHECK(r.out.empty() && f.gate->waiters() == 2);
  CHECK(f.gate->forget(9));
  f.gate->release(f.instance.get());  // to the lane's waiter, which runs on the worker
  CHECK(wait_until(r.recorder, 1));
  CHECK(r.recorder.answers.size() == 1 && f.instance->runs == 1 && !f.instance->busy.load());
  // A free instance and nobody queued: on the link thread again.
  CHECK(r.serve(lane) == Lane::Result::Served);
  CHECK(!r.out.empty() && f.instance->runs == 2);
}

TEST(the_served_log_asks_once_to_be_folded) {
  ServedLog log(2);
  CHECK(!log.add(ServedRecord{}));
  CHECK(log.add(ServedRecord{}));
  CHECK(!log.add(ServedRecord{}));
  CHECK(log.drain().size() == 3);
  CHECK(log.size() == 0);
}

namespace {

bool readable(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, timeout_ms) == 1;
}

}  // namespace

TEST(the_inbox_wakes_once_per_batch_and_drains_everything) {
  Inbox inbox;
  CHECK(inbox.fd() >= 0);
  CHECK(!readable(inbox.fd(), 0));
  std::vector<std::string> batch{"a", "b"};
  inbox.push(3, batch);
  CHECK(batch.empty());
  CHECK(readable(inbox.fd(), 0));
  std::vector<std::string> more{"c"};
  inbox.push(4, more);
  inbox.want_fold();
  bool fold = false;
  std::vector<InboxItem> items = inbox.drain(fold);
  CHECK(fold);
  CHECK(items.size() == 3 && items[0].payload == "a" && items[2].link == 4);
  CHECK(!readable(inbox.fd(), 0));  // nothing left: the loop sleeps
  inbox.lost(3);
  CHECK(readable(inbox.fd(), 0));
  items = inbox.drain(fold);
  CHECK(!fold && items.size() == 1 && items[0].lost && items[0].link == 3);
}

namespace {

std::string framed(const std::string& payload) {
  uint32_t length = static_cast<uint32_t>(payload.size());
  return std::string(reinterpret_cast<const char*>(&length), 4) + payload;
}

// Reads from `fd` until `n` bytes came (or two seconds passed).
std::string read_bytes(int fd, size_t n) {
  std::string got;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
    if (!readable(fd, 100)) continue;
    char buffer[4096];
    ssize_t r = recv(fd, buffer, sizeof(buffer), 0);
    if (r <= 0) break;
    got.append(buffer, static_cast<size_t>(r));
  }
  return got;
}

std::vector<InboxItem> wait_for_items(Inbox& inbox, size_t n) {
  std::vector<InboxItem> all;
  bool fold;
  for (int i = 0; i < 40 && all.size() < n; ++i) {
    readable(inbox.fd(), 50);
    for (auto& item : inbox.drain(fold)) all.push_back(std::move(item));
  }
  return all;
}

}  // namespace

TEST(a_link_answers_lane_requests_itself_and_hands_over_the_rest) {
  Fixture f;
  Routes routes;
  routes.publish(std::make_shared<RouteTable>(f.table));
  Inbox inbox;
  int pair[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
  auto link = std::make_unique<FrontLink>(pair[1], 11, 2, f.arena, routes, f.lane, inbox);
  CHECK(link->start());
  InferRequest declined = f.request();
  declined.generation = 9;  // another table: Python's to serve
  std::string sent =
      framed(write_request(f.request())) + framed("(marshal)") + framed(write_request(declined));
  CHECK(send(pair[0], sent.data(), sent.size(), 0) == static_cast<ssize_t>(sent.size()));
  std::string answer = read_bytes(pair[0], 4 + 16 + 16 + 8);
  CHECK(answer.size() == 4 + 16 + 16 + 8);
  CHECK(read_answer(answer).request_id == 42);
  std::vector<InboxItem> items = wait_for_items(inbox, 2);
  CHECK(items.size() == 2);
  CHECK(items.size() == 2 && items[0].link == 11 && items[0].payload == "(marshal)");
  CHECK(items.size() == 2 && items[1].payload == write_request(declined));
  CHECK(link->served() == 1);
  // One that ran and failed reaches Python with why, to be answered, not run again.
  f.instance->fail = true;
  std::string failing = framed(write_request(f.request()));
  CHECK(send(pair[0], failing.data(), failing.size(), 0) == static_cast<ssize_t>(failing.size()));
  items = wait_for_items(inbox, 1);
  CHECK(items.size() == 1 && items[0].payload == write_request(f.request()));
  CHECK(items.size() == 1 && !items[0].failure.ok() && f.instance->runs == 2);
  CHECK(link->served() == 1);
  // Python's own messages go out through the link.
  std::string reply = framed("(answer)");
  link->send(reply.data(), reply.size());
  CHECK(read_bytes(pair[0], reply.size()) == reply);
  // The front going away ends the link, which says so once.
  close(pair[0]);
  items = wait_for_items(inbox, 1);
  CHECK(items.size() == 1 && items[0].lost && items[0].link == 11);
  link->stop();
}

TEST(a_lane_request_waiting_for_an_instance_is_dropped_by_its_cancel) {
  Fixture f;
  Workers workers(1);
  Lane lane(f.log, &workers);
  f.gate->observe(5000000);
  f.gate->observe(5000000);  // long executes: on a worker, waiting for the instance if busy
  f.instance->busy = true;
  Routes routes;
  routes.publish(std::make_shared<RouteTable>(f.table));
  Inbox inbox;
  int pair[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
  auto link = std::make_unique<FrontLink>(pair[1], 5, 1, f.arena, routes, lane, inbox);
  CHECK(link->start());
  auto cancel = [](uint64_t id, bool deadline = false) {
    std::string message(kCancelSize, '\0');
    message[0] = static_cast<char>(kCancelTag);
    message[1] = deadline ? 1 : 0;
    std::memcpy(message.data() + 8, &id, sizeof(id));
    return message;
  };
  std::string request = write_request(f.request());
  std::string sent = framed(request);
  CHECK(send(pair[0], sent.data(), sent.size(), 0) == static_cast<ssize_t>(sent.size()));
  for (int i = 0; i < 100 && f.gate->waiters() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(f.gate->waiters() == 1);
  // Its cancel takes it out of the gate's queue and hands it to Python as cancelled; a cancel
  // for a request the lane does not hold (Python's own) goes to Python as it came.
  sent = framed(cancel(42)) + framed(cancel(77));
  CHECK(send(pair[0], sent.data(), sent.size(), 0) == static_cast<ssize_t>(sent.size()));
  std::vector<InboxItem> items = wait_for_items(inbox, 2);
  CHECK(items.size() == 2 && items[0].cancelled && items[0].payload == request);
  CHECK(items.size() == 2 && !items[0].deadline);
  CHECK(items.size() == 2 && !items[1].cancelled && items[1].payload == cancel(77));
  CHECK(f.gate->waiters() == 0);
  // Cancelled at its deadline (a gRPC call's): handed over saying so, for Python to count.
  InferRequest later = f.request();
  later.request_id = 43;
  std::string second = write_request(later);
  sent = framed(second);
  CHECK(send(pair[0], sent.data(), sent.size(), 0) == static_cast<ssize_t>(sent.size()));
  for (int i = 0; i < 100 && f.gate->waiters() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  sent = framed(cancel(43, true));
  CHECK(send(pair[0], sent.data(), sent.size(), 0) == static_cast<ssize_t>(sent.size()));
  items = wait_for_items(inbox, 1);
  CHECK(items.size() == 1 && items[0].cancelled && items[0].deadline);
  CHECK(items.size() == 1 && items[0].payload == second);
  CHECK(f.gate->waiters() == 0);
  f.gate->release(f.instance.get());  // nobody waits for it now: nothing runs
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(f.instance->runs == 0 && !f.instance->busy.load());
  close(pair[0]);
  link->stop();  // returns: the cancelled request is no longer in flight
}

TEST(a_stopped_link_ends_its_thread_without_reporting_a_loss) {
  Fixture f;
  Routes routes;
  Inbox inbox;
  int pair[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
  {
    FrontLink link(pair[1], 1, 0, f.arena, routes, f.lane, inbox);
    CHECK(link.start());
    link.stop();
    std::string late = framed("(late)");
    link.send(late.data(), late.size());  // dropped: the link has ended
  }
  bool fold;
  CHECK(inbox.drain(fold).empty());
  char byte;
  CHECK(recv(pair[0], &byte, 1, MSG_DONTWAIT) == 0);  // closed, nothing sent
  close(pair[0]);
}

TEST(a_message_too_long_to_be_real_ends_the_link) {
  Fixture f;
  Routes routes;
  Inbox inbox;
  int pair[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
  FrontLink link(pair[1], 5, 0, f.arena, routes, f.lane, inbox);
  CHECK(link.start());
  uint32_t huge = 0xFFFFFFFFu;
  CHECK(send(pair[0], &huge, 4, 0) == 4);
  std::vector<InboxItem> items = wait_for_items(inbox, 1);
  CHECK(items.size() == 1 && items[0].lost);
  link.stop();
  close(pair[0]);
}
