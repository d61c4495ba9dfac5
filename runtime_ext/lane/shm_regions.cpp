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

bool ShmRegions::add(const std::string& name, uint8_t* base, uint64_t size, int fd, uint64_t needed,
                     int device) {
  auto region = std::make_shared<ShmRegion>();
  region->base = base;
  region->size = size;
  region->fd = fd;
  region->needed = needed;
  region->device = device;
  std::lock_guard<std::mutex> lock(mutex_);
  return regions_[device >= 0].emplace(name, std::move(region)).second;
}

std::pair<std::string, uint32_t> ShmRegions::remove(const std::vector<std::string>& names,
                                                    bool cuda) {
  auto& regions = regions_[cuda];
  std::lock_guard<std::mutex> lock(mutex_);
  for (const std::string& name : names) {
    auto found = regions.find(name);
    if (found != regions.end() && found->second->in_flight > 0) {
      return {name, found->second->in_flight};
    }
  }
  for (const std::string& name : names) regions.erase(name);
  return {"", 0};
}

Hold ShmRegions::acquire(std::string_view name) {
  std::string key(name);
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& regions : regions_) {
    auto found = regions.find(key);
    if (found == regions.end()) continue;
    ++found->second->in_flight;
    return Hold(this, found->second);
  }
  return Hold();
}

void ShmRegions::release(ShmRegion& region) {
  std::lock_guard<std::mutex> lock(mutex_);
  --region.in_flight;
}

uint32_t ShmRegions::in_flight(const std::string& name, bool cuda) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = regions_[cuda].find(name);
  return found == regions_[cuda].end() ? 0 : found->second->in_flight;
}

size_t ShmRegions::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return regions_[0].size() + regions_[1].size();
}

bool ShmRegions::intact(const ShmRegion& region) {
  return region.device >= 0 || object_bytes(region) >= region.needed;
}

uint64_t ShmRegions::object_bytes(const ShmRegion& region) {
  struct stat info;
  return fstat(region.fd, &info) == 0 ? static_cast<uint64_t>(info.st_size) : 0;
}

}  // namespace ethost::lane
