// The client shared memory regions the engine's Python side mapped or opened (service/shm/), as
// the lane binds requests' tensors in them: system regions (a mapping of the client's object) and
// CUDA regions (a device allocation opened from its IPC handle, `device` >= 0), each kind under
// its own names, a name looked up among the system ones first, as Python looks it up. Python
// registers each region here once it mapped it and removes it before it unmaps (or closes) it; a
// lane request holds the regions it names (Hold) from before it binds them until it is answered,
// and remove() refuses, under the one lock that acquire() takes, while any is held: a region in use
// is never unmapped under an execute, and Python answers that unregister with its 409 as it does
// for the requests it holds itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ethost::lane {

struct ShmRegion {
  uint8_t* base = nullptr;  // the registered window as mapped here (CUDA: its device address)
  uint64_t size = 0;        // its byte size
  int fd = -1;              // the object's descriptor (Python's; closed after remove())
  uint64_t needed = 0;      // the object's size the window needs (registered offset + size)
  uint32_t in_flight = 0;   // lane requests holding it (under the table's lock)
  int device = -1;          // a CUDA region's device; -1 for a system region
};

class ShmRegions;

// One region held by one request; released when it goes.
class Hold {
 public:
  Hold() = default;
  Hold(ShmRegions* table, std::shared_ptr<ShmRegion> region)
      : table_(table), region_(std::move(region)) {}
  Hold(Hold&& other) noexcept : table_(other.table_), region_(std::move(other.region_)) {}
  Hold& operator=(Hold&& other) noexcept;
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
  ~Hold();
  const ShmRegion* region() const { return region_.get(); }

 private:
  ShmRegions* table_ = nullptr;
  std::shared_ptr<ShmRegion> region_;
};

class ShmRegions {
 public:
  // False when `name` is registered already in its kind (Python refused that before asking).
  // `device` >= 0: a CUDA region on that device (no object: `fd` -1, `needed` 0).
  bool add(const std::string& name, uint8_t* base, uint64_t size, int fd, uint64_t needed,
           int device = -1);
  // Removes every one of `names` it holds of the kind, or none while any is in flight: then
  // (that name, its requests in flight); ("", 0) when removed.
  std::pair<std::string, uint32_t> remove(const std::vector<std::string>& names, bool cuda = false);
  // The region named `name` (a system one, else a CUDA one), held for the caller; an empty
  // Hold when there is none.
  Hold acquire(std::string_view name);
  uint32_t in_flight(const std::string& name, bool cuda = false) const;
  size_t size() const;

  // Whether the object behind `region` still has the bytes its window needs (a client that
  // shrank it would make a read of the mapping fault): one fstat. A CUDA region's opened
  // allocation stays valid until Python closes it, whatever its client does.
  static bool intact(const ShmRegion& region);
  // The object's bytes now (0 when fstat fails): what a refusal says it shrank to.
  static uint64_t object_bytes(const ShmRegion& region);

 private:
  friend class Hold;
  void release(ShmRegion& region);

  mutable std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<ShmRegion>> regions_[2];  // system, CUDA
};

}  // namespace ethost::lane
