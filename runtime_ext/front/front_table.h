// The front's copy of the model table, as much of it as its native path checks requests
// against: the served versions' methods that the engine's lane serves (service/engine/
// lane_routes.py), each with its route id and its tensors. Published by the Python side whenever
// it takes a new table (service/front/engine_requests.py); immutable once published.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace etrt_front {

// The Open Inference Protocol's datatypes, with their byte sizes (BF16 and FP16: 2).
enum class Datatype : uint8_t { Bool, U8, U16, U32, U64, I8, I16, I32, I64, F16, F32, F64, BF16 };

struct DatatypeInfo {
  Datatype type;
  std::string_view name;
  uint8_t size;
};

inline constexpr DatatypeInfo kDatatypes[] = {
    {Datatype::Bool, "BOOL", 1},  {Datatype::U8, "UINT8", 1},   {Datatype::U16, "UINT16", 2},
    {Datatype::U32, "UINT32", 4}, {Datatype::U64, "UINT64", 8}, {Datatype::I8, "INT8", 1},
    {Datatype::I16, "INT16", 2},  {Datatype::I32, "INT32", 4},  {Datatype::I64, "INT64", 8},
    {Datatype::F16, "FP16", 2},   {Datatype::F32, "FP32", 4},   {Datatype::F64, "FP64", 8},
    {Datatype::BF16, "BF16", 2},
};

inline const DatatypeInfo* find_datatype(std::string_view name) {
  for (const auto& info : kDatatypes) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

inline const DatatypeInfo& info_of(Datatype type) {
  return kDatatypes[static_cast<size_t>(type)];
}

struct TensorSpec {
  std::string name;
  bool tensor = true;  // else a scalar (an output only: inputs of lane routes are tensors)
  bool known = true;   // a datatype the protocol has (else `datatype` means nothing)
  Datatype datatype = Datatype::F32;
  std::vector<int64_t> shape;  // upper bounds where dynamic
  bool dynamic = false;
};

struct MethodEntry {
  std::string name;
  uint32_t route = 0;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
};

struct ModelEntry {
  std::string version;
  int64_t max_batch = 0;
  std::map<std::string, MethodEntry, std::less<>> methods;  // only the lane's

  const MethodEntry* method(std::string_view name) const {
    auto found = methods.find(name);
    return found == methods.end() ? nullptr : &found->second;
  }
};

struct FrontTable {
  uint64_t generation = 0;
  std::unordered_map<std::string, std::shared_ptr<const ModelEntry>> defaults;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const ModelEntry>> versions;

  // The entry a request runs on: the model's default for an empty `version`.
  const ModelEntry* entry(std::string_view model, std::string_view version) const {
    if (version.empty()) {
      auto found = defaults.find(std::string(model));
      return found == defaults.end() ? nullptr : found->second.get();
    }
    auto found = versions.find({std::string(model), std::string(version)});
    return found == versions.end() ? nullptr : found->second.get();
  }
};

}  // namespace etrt_front
