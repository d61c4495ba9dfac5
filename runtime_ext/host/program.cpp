#include "program.h"

#include "device_inputs.h"
#include "plan_reader.h"

#include "executorch_log.h"

#include <sys/stat.h>

#include <cerrno>

using executorch::extension::FlatTensorDataMap;
using executorch::extension::MmapDataLoader;
using executorch::extension::merged_data_map::MergedDataMap;
using executorch::runtime::Error;
using executorch::runtime::MethodMeta;
using executorch::runtime::NamedDataMap;
using executorch::runtime::Program;

namespace ethost {
namespace {

Outcome<std::unique_ptr<FlatTensorDataMap>> open_data_map(MmapDataLoader* loader,
                                                          const std::string& path) {
  clear_last_log_error();
  auto map = FlatTensorDataMap::load(loader);
  if (!map.ok()) {
    return from_executorch(map.error(), "loading data file", path);
  }
  return std::make_unique<FlatTensorDataMap>(std::move(map.get()));
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& part : parts) {
    out += (out.empty() ? "" : ", ") + part;
  }
  return out;
}

}  // namespace

Outcome<std::unique_ptr<MmapDataLoader>> map_file(const std::string& path) {
  struct stat info{};
  if (::stat(path.c_str(), &info) != 0) {
    return Status::os_error(errno, path, "");
  }
  if (S_ISDIR(info.st_mode)) {
    return Status::os_error(EISDIR, path, "expected a file");
  }
  if (info.st_size == 0) {
    return Status(Error::InvalidArgument, "the file is empty").at("opening", path);
  }
  clear_last_log_error();
  // No mlock: programs may be larger than RLIMIT_MEMLOCK, and pages are shared across instances.
  auto loader = MmapDataLoader::from(path.c_str(), MmapDataLoader::MlockConfig::NoMlock);
  if (!loader.ok()) {
    return from_executorch(loader.error(), "mapping", path);
  }
  return std::make_unique<MmapDataLoader>(std::move(loader.get()));
}

Outcome<std::vector<std::string>> data_file_keys(const std::string& path) {
  ETHOST_ASSIGN_OR_RETURN(auto loader, map_file(path));
  ETHOST_ASSIGN_OR_RETURN(auto map, open_data_map(loader.get(), path));
  auto count = map->get_num_keys();
  if (!count.ok()) {
    return from_executorch(count.error(), "reading keys of", path);
  }
  std::vector<std::string> keys;
  for (uint32_t i = 0; i < count.get(); ++i) {
    auto key = map->get_key(i);
    if (!key.ok()) {
      return from_executorch(key.error(), "reading keys of", path);
    }
    keys.emplace_back(key.get());
  }
  return keys;
}

Outcome<std::shared_ptr<LoadedProgram>> LoadedProgram::open(
    const std::string& pte_path, const std::vector<std::string>& data_paths) {
  std::shared_ptr<LoadedProgram> loaded(new LoadedProgram());
  loaded->path_ = pte_path;
  loaded->data_paths_ = data_paths;
  loaded->executes_ = ExecuteRegistry::process().enroll(pte_path);

  ETHOST_ASSIGN_OR_RETURN(loaded->pte_loader_, map_file(pte_path));

  for (const auto& data_path : data_paths) {
    ETHOST_ASSIGN_OR_RETURN(auto loader, map_file(data_path));
    ETHOST_ASSIGN_OR_RETURN(auto map, open_data_map(loader.get(), data_path));
    loaded->data_loaders_.push_back(std::move(loader));
    loaded->data_maps_.push_back(std::move(map));
  }
  if (loaded->data_maps_.size() == 1) {
    loaded->data_map_ = loaded->data_maps_.front().get();
  } else if (loaded->data_maps_.size() > 1) {
    std::vector<const NamedDataMap*> maps;
    for (const auto& map : loaded->data_maps_) {
      maps.push_back(map.get());
    }
    clear_last_log_error();
    auto merged = MergedDataMap::load({maps.data(), maps.size()});
    if (!merged.ok()) {
      auto error = from_executorch(merged.error(), "merging data files", join(data_paths));
      if (error.reason.empty()) {
        error.reason = "the data files could not be merged (a key present in two files?)";
      }
      return error;
    }
    loaded->merged_ = std::make_unique<MergedDataMap>(std::move(merged.get()));
    loaded->data_map_ = loaded->merged_.get();
  }

  clear_last_log_error();
  auto program =
      Program::load(loaded->pte_loader_.get(), Program::Verification::InternalConsistency);
  if (!program.ok()) {
    return from_executorch(program.error(), "loading program", pte_path);
  }
  loaded->program_.emplace(std::move(program.get()));
  auto size = loaded->pte_loader_->size();
  if (size.ok()) {
    auto bytes =
        loaded->pte_loader_->load(0, size.get(),
                                  executorch::runtime::DataLoader::SegmentInfo(
                                      executorch::runtime::DataLoader::SegmentInfo::Type::Program));
    if (bytes.ok()) loaded->bytes_.emplace(std::move(bytes.get()));
  }
  return loaded;
}

std::vector<bool> LoadedProgram::inputs_read_only_by_device_delegates(
    const std::string& method) const {
  if (!bytes_) return {};
  return inputs_read_only_by_delegates(static_cast<const uint8_t*>(bytes_->data()), bytes_->size(),
                                       method, &takes_device_memory);
}

std::vector<bool> LoadedProgram::outputs_written_only_by_device_delegates(
    const std::string& method) const {
  if (!bytes_) return {};
  return outputs_written_only_by_delegates(static_cast<const uint8_t*>(bytes_->data()),
                                           bytes_->size(), method, &takes_device_memory);
}

std::vector<std::string> LoadedProgram::method_names() const {
  std::vector<std::string> names;
  for (size_t i = 0; i < program_->num_methods(); ++i) {
    auto name = program_->get_method_name(i);
    if (name.ok()) {
      names.emplace_back(name.get());
    }
  }
  return names;
}

Outcome<MethodMeta> LoadedProgram::method_meta(const std::string& name) const {
  clear_last_log_error();
  auto meta = program_->method_meta(name.c_str());
  if (!meta.ok()) {
    return from_executorch(meta.error(), "reading method '" + name + "' of", path_);
  }
  return meta.get();
}

}  // namespace ethost
