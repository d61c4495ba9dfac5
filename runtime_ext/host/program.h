// A loaded .pte plus its .ptd files: mapped once, verified once, shared read-only by every
// Method instance created from it (on any thread).
#pragma once

#include "execute_registry.h"
#include "status.h"

#include <executorch/extension/data_loader/mmap_data_loader.h>
#include <executorch/extension/flat_tensor/flat_tensor_data_map.h>
#include <executorch/extension/named_data_map/merged_data_map.h>
#include <executorch/runtime/executor/program.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ethost {

// Memory-maps a file, refusing what mmap would handle badly (missing, directory, empty).
Outcome<std::unique_ptr<executorch::extension::MmapDataLoader>> map_file(const std::string& path);

// Keys of one .ptd file, validating it as FlatTensor data.
Outcome<std::vector<std::string>> data_file_keys(const std::string& path);

class LoadedProgram {
 public:
  static Outcome<std::shared_ptr<LoadedProgram>> open(const std::string& pte_path,
                                                      const std::vector<std::string>& data_paths);

  const executorch::runtime::Program& program() const { return *program_; }
  // Null when the program came without data files.
  const executorch::runtime::NamedDataMap* data_map() const { return data_map_; }
  const std::string& path() const { return path_; }
  const std::vector<std::string>& data_paths() const { return data_paths_; }
  std::vector<std::string> method_names() const;
  Outcome<executorch::runtime::MethodMeta> method_meta(const std::string& name) const;
  // Per input of the method: whether only delegates taking device memory read it
  // (plan_reader.h); all false where the plan cannot be read.
  std::vector<bool> inputs_read_only_by_device_delegates(const std::string& method) const;
  std::vector<bool> outputs_written_only_by_device_delegates(const std::string& method) const;
  // Its executes in flight and whether it is a suspect of a GPU fault (execute_registry.h),
  // labelled with its path.
  ExecuteOwner& executes() const { return *executes_; }

 private:
  LoadedProgram() = default;

  std::string path_;
  std::vector<std::string> data_paths_;
  std::shared_ptr<ExecuteOwner> executes_;
  // Declaration order is destruction order in reverse: the loaders must outlive what reads them.
  std::unique_ptr<executorch::extension::MmapDataLoader> pte_loader_;
  std::vector<std::unique_ptr<executorch::extension::MmapDataLoader>> data_loaders_;
  std::vector<std::unique_ptr<executorch::extension::FlatTensorDataMap>> data_maps_;
  std::unique_ptr<executorch::extension::merged_data_map::MergedDataMap> merged_;
  const executorch::runtime::NamedDataMap* data_map_ = nullptr;
  std::optional<executorch::runtime::Program> program_;
  // The whole .pte, mapped once more for what Program does not expose (plan_reader.h).
  std::optional<executorch::runtime::FreeableBuffer> bytes_;
};

}  // namespace ethost
