#include "shm_regions.h"

#include <sys/stat.h>

namespace ethost::lane {

Hold& Hold::operator=(Hold&& other) noexcept {
  if (this != &other) {
    if (region_ != nullptr) table_->release(*region_);
    table_ = other.table_;
    region_ = std::move(other.region_);
  }
  return *this;
}

Hold::~Hold() {
  if (region_ != nullptr) table_->release(*region_);
}

bool ShmRegions::add(const std::string& name, uint8_t* base, uint64_t size, int fd,
                     uint64_t needed) {
  auto region = std::make_shared<ShmRegion>();
  region->base = base;
  region->size = size;
  region->fd = fd;
  region->needed = needed;
  std::lock_guard<std::mutex> lock(mutex_);
  return regions_.emplace(name, std::move(region)).second;
}

std::pair<std::string, uint32_t> ShmRegions::remove(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const std::string& name : names) {
    auto found = regions_.find(name);
    if (found != regions_.end() && found->second->in_flight > 0) {
      return {name, found->second->in_flight};
    }
  }
  for (const std::string& name : names) regions_.erase(name);
  return {"", 0};
}

Hold ShmRegions::acquire(std::string_view name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = regions_.find(std::string(name));
  if (found == regions_.end()) return Hold();
  ++found->second->in_flight;
  return Hold(this, found->second);
}

void ShmRegions::release(ShmRegion& region) {
  std::lock_guard<std::mutex> lock(mutex_);
  --region.in_flight;
}

uint32_t ShmRegions::in_flight(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = regions_.find(name);
  return found == regions_.end() ? 0 : found->second->in_flight;
}

size_t ShmRegions::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return regions_.size();
}

bool ShmRegions::intact(const ShmRegion& region) {
  return object_bytes(region) >= region.needed;
}

uint64_t ShmRegions::object_bytes(const ShmRegion& region) {
  struct stat info;
  return fstat(region.fd, &info) == 0 ? static_cast<uint64_t>(info.st_size) : 0;
}

}  // namespace ethost::lane
