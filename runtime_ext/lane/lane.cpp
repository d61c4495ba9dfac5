#include "lane.h"

#include "clock.h"
#include "lane_request.h"
#include "dtypes.h"
#include "window_copies.h"

#include <array>
#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace ethost::lane {
namespace {

using limits::align_up;
using limits::kAlignment;  // every slot and output in a front's arena

bool aligned(const uint8_t* address) {
  return reinterpret_cast<uintptr_t>(address) % kAlignment == 0;
}

// Where a tensor lies: the front's arena, a client's system region or a client's CUDA region.
enum class Where { Arena, System, Cuda };

// Binds input `input` of dtype `dtype` where it lies (at `input.offset` in `arena`, the front's
// arena or a client's region); false for anything out of bounds or off the boundary (the
// offset's in the arena, whose slots are laid out from it; the address's in a system region;
// none in a CUDA region, which the native host binds or stages as it does Python's).
bool bind(const WireInput& input, executorch::aten::ScalarType dtype, const ArenaView& arena,
          InputBinding& binding, Where where = Where::Arena, uint64_t* bound_bytes = nullptr) {
  const Dtype* entry = find_dtype(dtype);
  if (entry == nullptr) return false;
  uint64_t nbytes = entry->size();
  for (size_t d = 0; d < input.ndim; ++d) {
    int64_t extent = input.dims[d];
    if (extent < 0 || extent > std::numeric_limits<int32_t>::max()) return false;
    if (extent != 0 && nbytes > std::numeric_limits<uint64_t>::max() / extent) return false;
    nbytes *= static_cast<uint64_t>(extent);
  }
  bool on_boundary =
      where == Where::Cuda || (where == Where::System ? aligned(arena.base + input.offset)
                                                      : input.offset % kAlignment == 0);
  if (!inside(arena, input.offset, nbytes) || !on_boundary) return false;
  if (bound_bytes != nullptr) *bound_bytes = nbytes;
  binding.is_tensor = true;
  binding.dtype = dtype;
  binding.ndim = input.ndim;
  int32_t stride = 1;
  for (size_t d = input.ndim; d-- > 0;) {
    binding.sizes[d] = static_cast<int32_t>(input.dims[d]);
    binding.dim_order[d] = static_cast<uint8_t>(d);
    binding.strides[d] = stride;
    stride *= binding.sizes[d];
  }
  binding.data = arena.base + input.offset;
  binding.on_device = where == Where::Cuda;
  return true;
}

// Rows of a batched request: the same dim 0 on every input, 1 to max_batch; 0 otherwise.
int64_t rows_of(const InferRequest& request, int64_t max_batch) {
  int64_t rows = -1;
  for (size_t i = 0; i < request.input_count; ++i) {
    const WireInput& input = request.inputs[i];
    int64_t leading = input.ndim > 0 ? input.dims[0] : 0;
    if (rows >= 0 && leading != rows) return 0;
    rows = leading;
  }
  return rows >= 1 && rows <= max_batch ? rows : 0;
}

// Holds every region the request names (each once, its object checked intact once) into `job`;
// false, holding none, for a region unknown here (a CUDA one: Python binds those), a shrunk
// object, two references to one tensor or one to an output not asked for: Python says why.
bool hold_regions(ShmRegions* regions, const InferRequest& request, size_t output_count,
                  Prepared& job, RegionRefs& refs) {
  if (regions == nullptr) return false;
  std::vector<const std::string*> names;  // of job.holds, in order
  for (const WireShmRef& ref : request.refs) {
    if (ref.output && (ref.tensor >= output_count || (request.outputs >> ref.tensor & 1) == 0)) {
      return false;
    }
    InRegion& slot = ref.output ? refs.outputs[ref.tensor] : refs.inputs[ref.tensor];
    if (slot.ref != nullptr) return false;
    const ShmRegion* region = nullptr;
    for (size_t h = 0; h < names.size() && region == nullptr; ++h) {
      if (*names[h] == ref.region) region = job.holds[h].region();
    }
    if (region == nullptr) {
      Hold hold = regions->acquire(ref.region);
      if (hold.region() == nullptr || !ShmRegions::intact(*hold.region())) {
        job.holds.clear();
        return false;
      }
      region = hold.region();
      job.holds.push_back(std::move(hold));
      names.push_back(&ref.region);
    }
    slot = InRegion{&ref, region};
  }
  return true;
}

// The answer's shapes, and the outputs copied into their windows; `in_place` counts those the
// execute wrote into system windows (the host counts CUDA ones), `to_device` those copied into
// CUDA windows. Not ok: an output was not written where it should have been, or one does not go
// into its window (OutputWindow: Python refuses it in its words).
Status write(Prepared& job, const std::vector<OutputBuffer>& outputs, const uint8_t* room,
             uint32_t& in_place, uint32_t& to_device) {
  if (outputs.size() != job.destinations.size()) {
    return Status(Error::Internal, "the method returned " + std::to_string(outputs.size()) +
                                       " outputs, its signature has " +
                                       std::to_string(job.destinations.size()));
  }
  size_t next_copy = 0;  // job.copied is in the outputs' order, as job.answer
  for (WireOutput& wire : job.answer) {
    const OutputBuffer& output = outputs[wire.index];
    if (output.is_none || !output.in_destination || output.shape.size() > kMaxDims) {
      return Status(Error::Internal, "output " + std::to_string(wire.index) +
                                         " was not written into the room reserved for it");
    }
    wire.ndim = static_cast<uint32_t>(output.shape.size());
    uint64_t elements = 1;
    for (size_t d = 0; d < output.shape.size(); ++d) {
      wire.dims[d] = static_cast<int64_t>(output.shape[d]);
      elements *= output.shape[d];
    }
    if (wire.offset != kInRegion) continue;
    if (next_copy == job.copied.size() || job.copied[next_copy].index != wire.index) {
      in_place += job.in_system_window[wire.index];
      continue;
    }
    const Copied& copy = job.copied[next_copy++];
    const Dtype* entry = find_dtype(output.dtype);
    if (entry == nullptr) {
      return Status(Error::Internal, "output " + std::to_string(wire.index) + " has no dtype");
    }
    uint64_t nbytes = elements * entry->size();
    if (nbytes > copy.window_bytes) return Status::output_window(wire.index, nbytes);
    // Its client may have shrunk the object meanwhile: a write past its end would fault.
    if (!ShmRegions::intact(*copy.region)) {
      return Status::region_shrank(wire.index, nbytes, ShmRegions::object_bytes(*copy.region),
                                   copy.region->needed);
    }
    ETHOST_RETURN_IF_ERROR(copy_into(*copy.region, copy.window, room + copy.at, nbytes));
    to_device += copy.region->device >= 0;
  }
  return Status();
}

// Executes under the claim (given back here, or on to a request waiting for it); appends the
// answer to `out` and records the request. Not ok: the execute ran and failed, or did not write
// what it should (the request is answered with that, never run again). An output refused by its
// window (OutputWindow) leaves the request counted as served, as the engine's Python counts an
// execute whose output it then refuses.
Status run(Prepared& job, ServedLog& log, std::string& out, bool& fold) {
  uint64_t bound = now_ns();
  uint8_t* room = job.scratch_bytes > 0 ? scratch(job.scratch_bytes) : nullptr;
  for (const Copied& copy : job.copied) job.destinations[copy.index].data = room + copy.at;
  Outcome<std::vector<OutputBuffer>> ran = job.instance->run(job.bindings, &job.destinations);
  job.route->gate->observe(job.instance->last_run_ns());
  job.route->gate->release(job.instance);  // or on to the request waiting for it
  job.instance = nullptr;
  uint64_t executed = now_ns();
  uint32_t in_place = job.shm_tensors, to_device = 0;
  Status written =
      ran.ok() ? write(job, ran.value(), room, in_place, to_device) : ran.take_status();
  if (to_device > 0) log.count_device_copies(to_device);
  job.holds.clear();  // before it is answered: its client may unregister the regions then
  bool refused = written.kind == Status::Kind::OutputWindow;
  if (!written.ok() && !refused) return written;
  if (!refused) append_answer(out, job.request_id, job.answer.data(), job.answer.size());
  if (job.in_regions) log.count_shm(in_place, !refused);
  uint64_t done = now_ns();
  // A wait for an instance counts in the request's time, not in its input phase.
  uint64_t input_ns = bound - job.begun - job.waited_ns;
  fold = log.add(ServedRecord{job.route, job.front, job.rows, done - job.begun, input_ns,
                              executed - bound, done - executed, wall_s()}) ||
         fold;
  return written;
}

}  // namespace

Lane::Result Lane::serve(const std::shared_ptr<const RouteTable>& table, const uint8_t* message,
                         size_t size, const ArenaView& arena, int front, std::string& out,
                         bool& fold, Status& failure, Replies* replies) {
  uint64_t begun = now_ns();
  Outcome<InferRequest> parsed = read_request(message, size);
  if (table == nullptr || !parsed.ok()) return Result::Declined;
  InferRequest request = parsed.take();
  if (request.generation != table->generation) return Result::Declined;
  auto found = table->routes.find(request.route);
  if (found == table->routes.end()) return Result::Declined;
  const Route& route = *found->second;
  MethodGate& gate = *route.gate;
  // A batch runs on a worker whatever its execute takes.
  bool inline_run = route.batcher == nullptr && gate.short_for_lane(table->inline_ns);
  if (!gate.open_for_lane() ||
      (!inline_run && (workers_ == nullptr || replies == nullptr || !route.on_workers)) ||
      request.input_count != route.inputs.size()) {
    return Result::Declined;
  }
  auto job = std::make_unique<Prepared>();
  job->route = found->second;
  job->request_id = request.request_id;
  job->front = front;
  job->begun = begun;
  if (route.max_batch > 0 && (job->rows = rows_of(request, route.max_batch)) == 0) {
    return Result::Declined;
  }
  size_t output_count = route.most_bytes.size();
  RegionRefs refs;
  if (!request.refs.empty() && !hold_regions(regions_, request, output_count, *job, refs)) {
    return Result::Declined;
  }
  job->in_regions = !request.refs.empty();
  job->bindings.resize(request.input_count);
  for (size_t i = 0; i < request.input_count; ++i) {
    const InRegion& shm = refs.inputs[i];
    if (shm.ref == nullptr) {
      if (!bind(request.inputs[i], route.inputs[i], arena, job->bindings[i])) {
        return Result::Declined;
      }
      continue;
    }
    // In the client's region, where it lies: exactly its bytes (else Python says why); in a
    // system region on the boundary (else Python copies it) and never a BOOL (Python reads any
    // non-zero byte as true); a CUDA one as its device address, which the host counts.
    WireInput in_region = request.inputs[i];
    in_region.offset = shm.ref->offset;
    uint64_t nbytes = 0;
    Where where = shm.region->device >= 0 ? Where::Cuda : Where::System;
    if ((where == Where::System && route.inputs[i] == executorch::aten::ScalarType::Bool) ||
        !bind(in_region, route.inputs[i], ArenaView{shm.region->base, shm.region->size},
              job->bindings[i], where, &nbytes) ||
        nbytes != shm.ref->byte_size) {
      return Result::Declined;
    }
    if (where == Where::System) ++job->shm_tensors;
  }
  // Outputs asked for that the method has, and a room in the arena: whether it runs alone or
  // in a batch.
  if (request.outputs == 0 || output_count > kMaxOutputs ||
      (output_count < kMaxOutputs && (request.outputs >> output_count) != 0) ||
      !inside(arena, request.room_offset, request.room_size)) {
    return Result::Declined;
  }
  if (route.batcher != nullptr) {
    return queue_for_batch(found->second, request, *job, refs, arena, message, size, replies);
  }
  // The room, laid out as the Python side lays it out (service/engine/outputs.py): each output
  // asked for at its upper bound, 256-byte aligned, in the method's order.
  job->destinations.resize(output_count);
  uint64_t at = request.room_offset, end = request.room_offset + request.room_size;
  for (size_t index = 0; index < output_count; ++index) {
    if ((request.outputs >> index & 1) == 0) continue;
    uint64_t most = route.most_bytes[index];
    if (const InRegion& shm = refs.outputs[index]; shm.ref != nullptr) {
      // Written by the execute into its window when that may take the output's bound (a
      // system one on the boundary), else copied there from scratch room (Copied).
      ArenaView window{shm.region->base, shm.region->size};
      uint8_t* start = shm.region->base + shm.ref->offset;
      bool on_device = shm.region->device >= 0;
      if (most == 0 || !inside(window, shm.ref->offset, shm.ref->byte_size)) {
        return Result::Declined;
      }
      if (shm.ref->byte_size >= most && (on_device || aligned(start))) {
        job->destinations[index] = OutputDestination{start, shm.ref->byte_size, !on_device};
        job->in_system_window[index] = !on_device;
      } else {
        if (on_device && !copies_to(shm.region->device)) return Result::Declined;
        uint64_t at = align_up(job->scratch_bytes);
        job->copied.push_back(Copied{index, start, shm.ref->byte_size, shm.region, at});
        if (most > kScratchMost - at) return Result::Declined;
        job->scratch_bytes = at + most;
        job->destinations[index] = OutputDestination{nullptr, most, true};  // run() places it
      }
      WireOutput wire;
      wire.index = static_cast<uint32_t>(index);
      wire.offset = kInRegion;
      job->answer.push_back(wire);
      continue;
    }
    uint64_t start = align_up(at);
    if (most == 0 || start > end || most > end - start) return Result::Declined;
    job->destinations[index] = OutputDestination{arena.base + start, most, true};
    WireOutput wire;
    wire.index = static_cast<uint32_t>(index);
    wire.offset = start;
    job->answer.push_back(wire);
    at = start + most;
  }
  if (inline_run) {
    job->instance = gate.claim();
    if (job->instance != nullptr) {
      failure = run(*job, log_, out, fold);
      return failure.ok() ? Result::Served : Result::Failed;
    }
    // Every instance busy, or promised to someone queued: it waits in the gate's queue, as a
    // longer execute does. Declined, it would join that queue from the event loop instead, at a
    // hundred times the cost; under a burst the loop's queue then never emptied, claim() kept
    // yielding to it, and the method stayed on the slow path (a fresh server at 256
    // connections: 7k instead of 270k req/s).
    if (workers_ == nullptr || replies == nullptr || !route.on_workers) return Result::Declined;
  }
  // On a worker, with an instance free now or the next one freed.
  auto kept = std::make_shared<std::string>(reinterpret_cast<const char*>(message), size);
  ServedLog* log = &log_;
  Workers* workers = workers_;
  std::shared_ptr<Prepared> shared(std::move(job));
  uint64_t waiter = gate.lane_waiter_id();
  replies->waiting(request.request_id, found->second, waiter, kept);
  gate.claim_or_wait(
      [shared, kept, log, replies, workers](Runnable* instance) {
        replies->waited(shared->request_id);
        if (instance == nullptr) {  // the method closed meanwhile: Python answers
          shared->holds.clear();
          replies->declined(*kept);
          replies->finished();
          return;
        }
        shared->instance = instance;
        shared->waited_ns = now_ns() - shared->begun;
        workers->submit([shared, kept, log, replies] {
          std::string answer;
          bool wants_fold = false;
          Status ran = run(*shared, *log, answer, wants_fold);
          if (ran.ok()) {
            replies->answered(answer);
          } else {
            replies->failed(*kept, std::move(ran));
          }
          if (wants_fold) replies->want_fold();
          replies->finished();
        });
      },
      waiter);
  return Result::Queued;
}

}  // namespace ethost::lane
