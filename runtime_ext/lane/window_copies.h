// Outputs the lane copies into clients' shared memory windows after their execute (lane.h): one
// whose window may not take its upper bound is written by the execute into this thread's scratch
// room, then its bytes go into the window, as the engine's Python copies the host's result
// there (service/shm/binding.py: write_outputs), a CUDA window's on the device's stream.
#pragma once

#include "shm_regions.h"
#include "status.h"

#include <cstdint>

namespace ethost::lane {

// The most scratch room a request may take: each thread keeps the most it took (a program's
// upper bounds can be far above what it writes); a request needing more is left to Python, which
// copies the host's result, of the output's real size.
constexpr uint64_t kScratchMost = uint64_t{64} << 20;

// This thread's scratch room for `nbytes` (256-byte aligned): an execute and its copies out of
// it run on one thread, so it is reused by the thread's next request.
uint8_t* scratch(uint64_t nbytes);

// Whether this thread can copy into a window of a CUDA region on `device`: the device memory
// executes use is that device's (Python copies into the region on its own device).
bool copies_to(int device);

// This thread's room in device memory for `nbytes` (256-byte aligned), on the device memory
// executes use: a batch's inputs that lie in CUDA regions are gathered there (batcher.h). Reused
// by the thread's next batch; given back when the thread ends.
Outcome<uint8_t*> device_scratch(uint64_t nbytes);

// Queues a copy between device addresses on this thread's stream; finish_copies() waits for
// every copy queued so far.
Status copy_on_device(uint8_t* to, const uint8_t* from, uint64_t nbytes);
Status finish_copies();

// As copy_into, but a copy into a CUDA window is only queued (true in `queued`): the caller
// waits for it with finish_copies() before it answers, once for all its requests' copies.
Status queue_into(const ShmRegion& region, uint8_t* window, const uint8_t* from, uint64_t nbytes,
                  bool& queued);

// Copies `nbytes` from host memory at `from` into `window` of `region` (a CUDA one through the
// device memory executes use, waited for: the request is answered next).
Status copy_into(const ShmRegion& region, uint8_t* window, const uint8_t* from, uint64_t nbytes);

}  // namespace ethost::lane
