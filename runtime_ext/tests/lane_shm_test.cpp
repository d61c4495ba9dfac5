// Lane requests whose tensors lie in clients' system shared memory regions (shm_regions.h): the
// region table's holds (a region in use cannot be removed), the references' wire layout, inputs
// bound and outputs written where they lie in a region, and every reason to leave a request to
// Python, each declined before anything ran and holding no region afterwards; an output whose
// window may not take its bound, copied there after the execute, or refused once it ran; CUDA
// regions (over the host-memory stand-in for device memory) bound as device addresses.
#include "check.h"
#include "device_memory.h"
#include "fake_runnable.h"
#include "lane.h"
#include "method_gate.h"
#include "routes.h"
#include "served_log.h"
#include "shm_regions.h"
#include "wire.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace ethost;
using namespace ethost::lane;
using ethost_test::FakeRunnable;
using executorch::aten::ScalarType;

namespace {

constexpr size_t kRegionBytes = 8192;

// A client's shared memory object (a memfd), mapped as the engine maps a registered region.
struct Object {
  Object() {
    fd = memfd_create("lane_shm_test", MFD_CLOEXEC);
    CHECK(fd >= 0 && ftruncate(fd, kRegionBytes) == 0);
    void* mapped = mmap(nullptr, kRegionBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(mapped != MAP_FAILED);
    base = static_cast<uint8_t*>(mapped);
  }
  ~Object() {
    munmap(base, kRegionBytes);
    close(fd);
  }
  int fd = -1;
  uint8_t* base = nullptr;
};

struct Fixture {
  Fixture() : arena_bytes(64 * 1024, 0), log(1000), lane(log, nullptr, &regions) {
    arena = ArenaView{arena_bytes.data(), arena_bytes.size()};
    instance = std::make_shared<FakeRunnable>();
    gate = std::make_shared<MethodGate>(std::vector<std::shared_ptr<Runnable>>{instance});
    gate->observe(2000);
    route = std::make_shared<Route>();
    route->id = 7;
    route->model = "tiny";
    route->version = "1";
    route->method = "forward";
    route->gate = gate;
    route->inputs = {ScalarType::Float};
    route->most_bytes = {16};
    table.generation = 5;
    table.inline_ns = 100000;
    table.routes[7] = route;
    CHECK(regions.add("r", object.base, kRegionBytes, object.fd, kRegionBytes));
  }

  // [2, 2] floats at 512 in region "r", the output into "r" at 1024 (16 bytes).
  InferRequest request() const {
    InferRequest r;
    r.route = 7;
    r.request_id = 9;
    r.generation = 5;
    r.room_offset = 1024;
    r.room_size = 512;
    r.outputs = 1;
    r.input_count = 1;
    r.inputs[0].ndim = 2;
    r.inputs[0].dims[0] = 2;
    r.inputs[0].dims[1] = 2;
    r.refs.push_back(WireShmRef{0, false, 512, 16, "r"});
    r.refs.push_back(WireShmRef{0, true, 1024, 16, "r"});
    return r;
  }

  Lane::Result serve(const InferRequest& r, std::string& out) {
    std::string message = write_request(r);
    bool fold = false;
    auto current = std::make_shared<RouteTable>(table);
    return lane.serve(current, reinterpret_cast<const uint8_t*>(message.data()), message.size(),
                      arena, 1, out, fold, failure, nullptr);
  }

  // Declined, nothing run, nothing answered, no region left held.
  bool declines(const InferRequest& r) {
    std::string out;
    int runs = instance->runs;
    return serve(r, out) == Lane::Result::Declined && out.empty() && instance->runs == runs &&
           regions.in_flight("r") == 0;
  }

  Object object;
  std::vector<uint8_t> arena_bytes;
  ArenaView arena;
  ServedLog log;
  ShmRegions regions;
  Lane lane;
  std::shared_ptr<FakeRunnable> instance;
  std::shared_ptr<MethodGate> gate;
  std::shared_ptr<Route> route;
  RouteTable table;
  Status failure;
};

}  // namespace

TEST(a_region_in_use_cannot_be_removed_until_its_requests_let_it_go) {
  Object object;
  ShmRegions regions;
  CHECK(regions.add("a", object.base, kRegionBytes, object.fd, kRegionBytes));
  CHECK(!regions.add("a", object.base, kRegionBytes, object.fd, kRegionBytes));  // taken
  CHECK(regions.add("b", object.base, 4096, object.fd, 4096));
  {
    Hold first = regions.acquire("a");
    Hold second = regions.acquire("a");
    CHECK(first.region() != nullptr && first.region()->base == object.base);
    CHECK(regions.in_flight("a") == 2);
    auto refused = regions.remove({"b", "a"});
    CHECK(refused.first == "a" && refused.second == 2);
    CHECK(regions.size() == 2);  // none removed, "b" neither
    Hold moved = std::move(second);
    CHECK(regions.in_flight("a") == 2);
  }
  CHECK(regions.in_flight("a") == 0);
  auto removed = regions.remove({"a", "b", "never"});
  CHECK(removed.first.empty() && removed.second == 0);
  CHECK(regions.size() == 0);
  CHECK(regions.acquire("a").region() == nullptr);  // gone: a request naming it is declined
}

TEST(an_object_shrunk_under_its_window_is_not_intact) {
  Object object;
  ShmRegion region{object.base, kRegionBytes, object.fd, kRegionBytes, 0};
  CHECK(ShmRegions::intact(region));
  CHECK(ftruncate(object.fd, kRegionBytes / 2) == 0);
  CHECK(!ShmRegions::intact(region));
}

TEST(references_survive_the_wire_layout_and_bad_ones_are_refused) {
  Fixture f;
  InferRequest r = f.request();
  std::string message = write_request(r);
  CHECK(message.size() == kRequestHead + kInputHead + 16 + 2 * (kShmRefHead + 1));
  auto read = [](const std::string& m) {
    return read_request(reinterpret_cast<const uint8_t*>(m.data()), m.size());
  };
  Outcome<InferRequest> back = read(message);
  CHECK(back.ok());
  InferRequest got = back.take();
  CHECK(got.refs.size() == 2 && got.refs[0].region == "r" && !got.refs[0].output);
  CHECK(got.refs[0].offset == 512 && got.refs[0].byte_size == 16);
  CHECK(got.refs[1].output && got.refs[1].tensor == 0 && got.refs[1].offset == 1024);
  CHECK(!read(message.substr(0, message.size() - 1)).ok());  // a name cut short
  CHECK(!read(message + "x").ok());
  r.refs[0].tensor = 1;  // the request has one input
  CHECK_CONTAINS(read(write_request(r)).status().reason, "reference to tensor 1");
}

TEST(tensors_in_a_region_are_bound_and_written_where_they_lie) {
  Fixture f;
  std::string out;
  CHECK(f.serve(f.request(), out) == Lane::Result::Served);
  CHECK(f.instance->runs == 1);
  CHECK(f.instance->bound.at(0).data == f.object.base + 512);
  CHECK(f.object.base[1024] == 0x40);  // the execute wrote the output into the region
  CHECK(f.arena_bytes[1024] == 0);     // and not into the room
  CHECK(f.regions.in_flight("r") == 0);
  CHECK(out.size() == 4 + kAnswerHead + kOutputHead + 8);
  uint64_t offset;
  std::memcpy(&offset, out.data() + 4 + kAnswerHead + 8, 8);
  CHECK(offset == kInRegion);
  CHECK(f.log.shm_requests() == 1 && f.log.shm_tensors() == 2);
  // An input in the region, the output in the room.
  InferRequest r = f.request();
  r.refs.pop_back();
  out.clear();
  CHECK(f.serve(r, out) == Lane::Result::Served);
  std::memcpy(&offset, out.data() + 4 + kAnswerHead + 8, 8);
  CHECK(offset == 1024 && f.arena_bytes[1024] == 0x40);
  CHECK(f.log.shm_requests() == 2 && f.log.shm_tensors() == 3);
}

TEST(what_python_must_judge_is_declined_before_it_runs_holding_nothing) {
  Fixture f;
  InferRequest r = f.request();
  r.refs[0].region = "unknown";
  CHECK(f.declines(r));
  r = f.request();
  r.refs[0].offset = 520;  // off the 256-byte boundary: Python copies it
  CHECK(f.declines(r));
  r = f.request();
  r.refs[0].byte_size = 20;  // not the input's bytes: Python's 400
  CHECK(f.declines(r));
  r = f.request();
  r.refs[0].offset = kRegionBytes - 8;  // past the region's end
  CHECK(f.declines(r));
  f.route->most_bytes = {uint64_t{1} << 30};  // copied from more scratch room than it keeps
  CHECK(f.declines(f.request()));
  f.route->most_bytes = {16};
  r = f.request();
  r.refs[1].offset = kRegionBytes;  // a window outside the region
  CHECK(f.declines(r));
  r = f.request();
  r.refs[1].tensor = 1;  // an output the method does not have
  CHECK(f.declines(r));
  r = f.request();
  r.refs.push_back(r.refs[0]);  // two references to one input
  CHECK(f.declines(r));
  f.route->inputs = {ScalarType::Bool};  // Python reads any non-zero byte as true
  r = f.request();
  r.refs[0].byte_size = 4;
  CHECK(f.declines(r));
  f.route->inputs = {ScalarType::Float};
  CHECK(ftruncate(f.object.fd, 1024) == 0);  // shrunk under the window: Python says so
  CHECK(f.declines(f.request()));
  CHECK(ftruncate(f.object.fd, kRegionBytes) == 0);
  Lane without(f.log, nullptr);  // a lane without regions leaves every such request to Python
  std::string message = write_request(f.request()), out;
  bool fold = false;
  auto table = std::make_shared<RouteTable>(f.table);
  CHECK(without.serve(table, reinterpret_cast<const uint8_t*>(message.data()), message.size(),
                      f.arena, 1, out, fold, f.failure, nullptr) == Lane::Result::Declined);
  CHECK(f.instance->runs == 0);
  std::string served;
  CHECK(f.serve(f.request(), served) == Lane::Result::Served);  // and the fixture's still is
}

TEST(a_request_that_failed_in_a_region_lets_it_go_before_python_answers) {
  Fixture f;
  f.instance->fail = true;
  std::string out;
  CHECK(f.serve(f.request(), out) == Lane::Result::Failed);
  CHECK(f.regions.in_flight("r") == 0 && out.empty());
  CHECK(f.log.shm_requests() == 0);
}

TEST(an_output_whose_window_is_below_its_bound_is_copied_into_it_when_it_fits) {
  Fixture f;
  f.route->most_bytes = {64};  // up to 16 floats; this request's output is 4 (16 bytes)
  std::memset(f.object.base + 1024, 0x11, 64);
  std::string out;
  CHECK(f.serve(f.request(), out) == Lane::Result::Served);
  CHECK(f.instance->runs == 1);
  CHECK(f.object.base[1024] == 0x40 && f.object.base[1039] == 0x40);
  CHECK(f.object.base[1040] == 0x11);  // its bytes, nothing past the window
  CHECK(f.arena_bytes[1024] == 0);     // nor in the room
  uint64_t offset;
  std::memcpy(&offset, out.data() + 4 + kAnswerHead + 8, 8);
  CHECK(offset == kInRegion);
  CHECK(f.regions.in_flight("r") == 0);
  // The request counted, its input as bound, the copied output not (as Python counts them).
  CHECK(f.log.shm_requests() == 1 && f.log.shm_tensors() == 1 && f.log.size() == 1);
  // A window off the 256-byte boundary is copied into likewise.
  InferRequest r = f.request();
  r.refs[1].offset = 1030;
  r.refs[1].byte_size = 64;
  out.clear();
  CHECK(f.serve(r, out) == Lane::Result::Served);
  CHECK(f.object.base[1030] == 0x40 && f.object.base[1045] == 0x40);
  CHECK(f.object.base[1046] == 0x11);
  CHECK(f.log.shm_requests() == 2 && f.log.shm_tensors() == 2);
}

TEST(an_output_that_outgrows_its_window_ran_once_and_fails_with_the_values_python_words) {
  Fixture f;
  f.route->most_bytes = {64};
  f.instance->output_elements = 8;  // 32 bytes into a 16-byte window
  std::memset(f.object.base + 1024, 0x11, 64);
  std::string out;
  CHECK(f.serve(f.request(), out) == Lane::Result::Failed);
  CHECK(f.instance->runs == 1 && out.empty());
  CHECK(f.failure.kind == Status::Kind::OutputWindow);
  CHECK(f.failure.output_index == 0 && f.failure.output_bytes == 32);
  CHECK(f.failure.object_bytes == -1);
  CHECK(f.object.base[1024] == 0x11);  // nothing written into the window
  CHECK(f.regions.in_flight("r") == 0);
  // Counted as Python counts an execute whose output it refuses: served, its bound input
  // counted, the request not.
  CHECK(f.log.size() == 1 && f.log.shm_requests() == 0 && f.log.shm_tensors() == 1);
}

TEST(an_object_shrunk_during_the_execute_is_not_written_into) {
  Fixture f;
  f.route->most_bytes = {64};
  f.instance->during = [&f] { CHECK(ftruncate(f.object.fd, 1024) == 0); };
  std::string out;
  CHECK(f.serve(f.request(), out) == Lane::Result::Failed);
  CHECK(f.instance->runs == 1 && out.empty());
  CHECK(f.failure.kind == Status::Kind::OutputWindow && f.failure.output_bytes == 16);
  CHECK(f.failure.object_bytes == 1024 &&
        f.failure.object_needed == static_cast<uint64_t>(kRegionBytes));
  CHECK(f.regions.in_flight("r") == 0);
}

namespace {

// A CUDA region "r" of kRegionBytes in the host stand-in's device memory, in place of the
// fixture's system one; the stand-in is what executes (and the lane's copies) use meanwhile.
struct CudaFixture : Fixture {
  CudaFixture() : memory(ethost_device::make_host_memory(false)) {
    ethost_device::use_memory(memory);
    base = static_cast<uint8_t*>(memory->allocate(kRegionBytes).take());
    std::memset(base, 0x11, kRegionBytes);
    CHECK(regions.remove({"r"}).second == 0);
    CHECK(regions.add("r", base, kRegionBytes, -1, 0, memory->device_id()));
  }
  ~CudaFixture() {
    memory->release(base);
    ethost_device::use_memory(nullptr);
  }
  std::shared_ptr<ethost_device::DeviceMemory> memory;
  uint8_t* base = nullptr;
};

}  // namespace

TEST(a_name_is_looked_up_among_system_regions_first_each_kind_removed_on_its_own) {
  Object object;
  std::vector<uint8_t> device(4096);
  ShmRegions regions;
  CHECK(regions.add("r", device.data(), 4096, -1, 0, 0));
  CHECK(!regions.add("r", device.data(), 4096, -1, 0, 0));  // taken in its kind
  CHECK(regions.acquire("r").region()->device == 0);
  CHECK(regions.add("r", object.base, kRegionBytes, object.fd, kRegionBytes));
  {
    Hold hold = regions.acquire("r");
    CHECK(hold.region()->device == -1 && hold.region()->base == object.base);
    CHECK(regions.in_flight("r") == 1 && regions.in_flight("r", true) == 0);
    CHECK(regions.remove({"r"}, true).second == 0);  // the CUDA one, not in use
  }
  CHECK(regions.size() == 1 && regions.remove({"r"}).second == 0 && regions.size() == 0);
  CHECK(ShmRegions::intact(ShmRegion{device.data(), 4096, -1, 0, 0, 0}));  // no object to shrink
}

TEST(tensors_in_a_cuda_region_go_to_the_host_as_device_addresses) {
  CudaFixture f;
  InferRequest r = f.request();
  r.refs[0].offset = 520;  // off the boundary: the host binds or stages it, as Python's
  std::string out;
  CHECK(f.serve(r, out) == Lane::Result::Served);
  CHECK(f.instance->runs == 1);
  CHECK(f.instance->bound.at(0).on_device && f.instance->bound.at(0).data == f.base + 520);
  CHECK(f.instance->given.at(0).data == f.base + 1024 && !f.instance->given.at(0).on_host);
  CHECK(f.base[1024] == 0x40);
  uint64_t offset;
  std::memcpy(&offset, out.data() + 4 + kAnswerHead + 8, 8);
  CHECK(offset == kInRegion);
  // The request counted; its CUDA tensors are the host's to count (bound or copied).
  CHECK(f.log.shm_requests() == 1 && f.log.shm_tensors() == 0 && f.log.shm_to_device() == 0);
  CHECK(f.regions.in_flight("r", true) == 0);
}

TEST(an_output_below_its_cuda_window_bound_is_copied_from_the_host_or_refused) {
  CudaFixture f;
  f.route->most_bytes = {64};
  std::string out;
  CHECK(f.serve(f.request(), out) == Lane::Result::Served);
  CHECK(f.instance->given.at(0).on_host && f.instance->given.at(0).data != f.base + 1024);
  CHECK(f.base[1024] == 0x40 && f.base[1039] == 0x40 && f.base[1040] == 0x11);
  CHECK(f.log.shm_requests() == 1 && f.log.shm_to_device() == 1);
  f.instance->output_elements = 8;  // 32 bytes into 16
  std::memset(f.base + 1024, 0x11, 64);
  out.clear();
  CHECK(f.serve(f.request(), out) == Lane::Result::Failed);
  CHECK(f.instance->runs == 2 && out.empty() && f.base[1024] == 0x11);
  CHECK(f.failure.kind == Status::Kind::OutputWindow && f.failure.output_bytes == 32);
  CHECK(f.log.shm_requests() == 1 && f.log.shm_to_device() == 1);
  CHECK(f.regions.in_flight("r", true) == 0);
  // A region on another device than the one executes use: Python copies on the region's.
  CHECK(f.regions.remove({"r"}, true).second == 0);
  CHECK(f.regions.add("r", f.base, kRegionBytes, -1, 0, f.memory->device_id() + 1));
  CHECK(f.declines(f.request()));
}
