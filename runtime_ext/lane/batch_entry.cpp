#include "batcher.h"
#include "dtypes.h"
#include "lane_request.h"
#include "window_copies.h"

#include <memory>
#include <string>

namespace ethost::lane {

using limits::align_up;

// A request to a method that merges (batcher.h), bound: its room checked for its rows'
// outputs, then queued for a batch. Declined (nothing ran) where the batcher does not take it:
// an asked output of unknown bound, a room too small for its rows, a CUDA region on another
// device than executes use, more scratch room than a thread keeps.
Lane::Result queue_for_batch(const std::shared_ptr<const Route>& route, const InferRequest& request,
                             Prepared& job, const RegionRefs& refs, const ArenaView& arena,
                             const uint8_t* message, size_t size, Replies* replies) {
  auto entry = std::make_unique<BatchEntry>();
  entry->bindings = std::move(job.bindings);
  uint64_t bytes = 0;
  for (size_t i = 0; i < request.input_count; ++i) {
    const InputBinding& binding = entry->bindings[i];
    // An input in a CUDA region is gathered on its device, the one executes use.
    if (binding.ndim == 0 || (binding.on_device && !copies_to(refs.inputs[i].region->device))) {
      return Lane::Result::Declined;
    }
    uint64_t nbytes = find_dtype(binding.dtype)->size();
    for (size_t d = 0; d < binding.ndim; ++d) nbytes *= static_cast<uint64_t>(binding.sizes[d]);
    entry->input_bytes.push_back(nbytes);
    bytes += align_up(nbytes);
  }
  uint64_t room_bytes = 0;
  for (size_t index = 0; index < route->most_bytes.size(); ++index) {
    bytes += align_up(route->most_bytes[index]);
    if ((request.outputs >> index & 1) == 0) continue;
    uint64_t row = route->row_bytes[index];
    if (route->most_bytes[index] == 0 || row == 0) return Lane::Result::Declined;
    BatchOutput asked;
    asked.wire.index = static_cast<uint32_t>(index);
    if (const InRegion& shm = refs.outputs[index]; shm.ref != nullptr) {
      ArenaView window{shm.region->base, shm.region->size};
      if (!inside(window, shm.ref->offset, shm.ref->byte_size) ||
          (shm.region->device >= 0 && !copies_to(shm.region->device))) {
        return Lane::Result::Declined;
      }
      asked.window = shm.region->base + shm.ref->offset;
      asked.window_bytes = shm.ref->byte_size;
      asked.region = shm.region;
    } else {
      room_bytes = align_up(room_bytes) + row * static_cast<uint64_t>(job.rows);
    }
    entry->outputs.push_back(asked);
  }
  if (room_bytes > request.room_size || bytes > kScratchMost) return Lane::Result::Declined;
  entry->route = route;
  entry->replies = replies;
  entry->message = std::make_shared<std::string>(reinterpret_cast<const char*>(message), size);
  entry->request_id = request.request_id;
  entry->waiter = route->gate->lane_waiter_id();
  entry->front = job.front;
  entry->rows = job.rows;
  entry->begun = job.begun;
  entry->arena = arena.base;
  entry->room_offset = request.room_offset;
  entry->room_size = request.room_size;
  entry->holds = std::move(job.holds);
  entry->shm_tensors = job.shm_tensors;
  entry->in_regions = job.in_regions;
  uint64_t request_id = entry->request_id, waiter = entry->waiter;
  std::shared_ptr<const std::string> kept = entry->message;
  replies->waiting(request_id, route, waiter, kept);
  if (!route->batcher->submit(std::move(entry))) {
    replies->waited(request_id);
    return Lane::Result::Declined;
  }
  return Lane::Result::Queued;
}

}  // namespace ethost::lane
