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

// Copies `nbytes` from host memory at `from` into `window` of `region` (a CUDA one through the
// device memory executes use, waited for: the request is answered next).
Status copy_into(const ShmRegion& region, uint8_t* window, const uint8_t* from, uint64_t nbytes);

}  // namespace ethost::lane
