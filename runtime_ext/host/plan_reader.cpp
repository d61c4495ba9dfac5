#include "plan_reader.h"

#include <cstring>
#include <optional>
#include <set>

namespace ethost {
namespace {

// Slots of ExecuTorch's schema (program.fbs); a union takes two: its type, then its value.
constexpr int kProgramPlans = 1;
constexpr int kPlanName = 0, kPlanValues = 2, kPlanInputs = 3, kPlanOutputs = 4, kPlanChains = 5,
              kPlanDelegates = 7;
constexpr int kChainInstructions = 2;
constexpr int kUnionType = 0, kUnionValue = 1;
constexpr int kDelegateId = 0;
constexpr int kCallIndex = 0, kCallArgs = 1;  // KernelCall, DelegateCall
constexpr int kListItems = 0;                 // TensorList, OptionalTensorList
constexpr uint8_t kKernelCall = 1, kDelegateCall = 2, kMoveCall = 3;
constexpr uint8_t kTensorList = 10, kOptionalTensorList = 11;

// A bounds-checked view of a flatbuffer; every read that would leave it fails instead.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  template <typename T>
  std::optional<T> read(size_t at) const {
    if (at > size_ || size_ - at < sizeof(T)) return std::nullopt;
    T value;
    std::memcpy(&value, data_ + at, sizeof(T));
    return value;
  }

  // The table `at` points to through a uoffset, or the root table for at == 0.
  std::optional<size_t> follow(size_t at) const {
    auto offset = read<uint32_t>(at);
    if (!offset) return std::nullopt;
    return at + *offset;
  }

  // Position of a table's field, or nullopt when absent.
  std::optional<size_t> field(size_t table, int slot) const {
    auto back = read<int32_t>(table);
    if (!back) return std::nullopt;
    int64_t vtable = static_cast<int64_t>(table) - *back;
    if (vtable < 0) return std::nullopt;
    auto vtable_size = read<uint16_t>(static_cast<size_t>(vtable));
    size_t entry = 4 + 2 * static_cast<size_t>(slot);
    if (!vtable_size || entry + 2 > *vtable_size) return std::nullopt;
    auto offset = read<uint16_t>(static_cast<size_t>(vtable) + entry);
    if (!offset || *offset == 0) return std::nullopt;
    return table + *offset;
  }

  std::optional<size_t> table(size_t table_at, int slot) const {
    auto at = field(table_at, slot);
    return at ? follow(*at) : std::nullopt;
  }

  // (first element, count) of a vector field; an absent field is an empty vector.
  std::optional<std::pair<size_t, uint32_t>> vector(size_t table_at, int slot) const {
    auto at = field(table_at, slot);
    if (!at) return std::make_pair(size_t{0}, uint32_t{0});
    auto start = follow(*at);
    if (!start) return std::nullopt;
    auto count = read<uint32_t>(*start);
    if (!count || (size_ - *start - 4) / 4 < *count) return std::nullopt;
    return std::make_pair(*start + 4, *count);
  }

  std::optional<std::vector<int32_t>> ints(size_t table_at, int slot) const {
    auto span = vector(table_at, slot);
    if (!span) return std::nullopt;
    std::vector<int32_t> out(span->second);
    for (uint32_t i = 0; i < span->second; ++i) out[i] = *read<int32_t>(span->first + 4 * i);
    return out;
  }

  std::optional<std::vector<size_t>> tables(size_t table_at, int slot) const {
    auto span = vector(table_at, slot);
    if (!span) return std::nullopt;
    std::vector<size_t> out;
    for (uint32_t i = 0; i < span->second; ++i) {
      auto element = follow(span->first + 4 * i);
      if (!element) return std::nullopt;
      out.push_back(*element);
    }
    return out;
  }

  std::optional<std::string> string(size_t table_at, int slot) const {
    auto span = vector(table_at, slot);  // a string is a byte vector; the count is bytes
    if (!span) return std::nullopt;
    auto at = field(table_at, slot);
    if (!at) return std::string();
    size_t start = *follow(*at) + 4;
    if (start > size_ || size_ - start < span->second) return std::nullopt;
    return std::string(reinterpret_cast<const char*>(data_ + start), span->second);
  }

 private:
  const uint8_t* data_;
  size_t size_;
};

std::optional<std::vector<bool>> read_plan(
    const Reader& r, const std::string& method,
    const std::function<bool(const std::string&)>& takes_device_memory) {
  auto root = r.follow(0);
  if (!root) return std::nullopt;
  auto plans = r.tables(*root, kProgramPlans);
  if (!plans) return std::nullopt;
  for (size_t plan : *plans) {
    if (r.string(plan, kPlanName) != method) continue;
    auto inputs = r.ints(plan, kPlanInputs);
    auto outputs = r.ints(plan, kPlanOutputs);
    auto delegates = r.tables(plan, kPlanDelegates);
    auto values = r.tables(plan, kPlanValues);
    auto chains = r.tables(plan, kPlanChains);
    if (!inputs || !outputs || !delegates || !values || !chains) return std::nullopt;
    std::vector<bool> device_delegate;
    for (size_t delegate : *delegates) {
      auto id = r.string(delegate, kDelegateId);
      if (!id) return std::nullopt;
      device_delegate.push_back(takes_device_memory(*id));
    }
    // Values something other than a device delegate may read on the CPU.
    std::set<int32_t> cpu_read(outputs->begin(), outputs->end());
    std::set<int32_t> delegate_read;
    for (size_t value : *values) {
      auto type = r.field(value, kUnionType);
      uint8_t kind = type ? r.read<uint8_t>(*type).value_or(0) : 0;
      if (kind != kTensorList && kind != kOptionalTensorList) continue;
      auto list = r.table(value, kUnionValue);
      auto items = list ? r.ints(*list, kListItems) : std::nullopt;
      if (!items) return std::nullopt;
      cpu_read.insert(items->begin(), items->end());
    }
    for (size_t chain : *chains) {
      auto instructions = r.tables(chain, kChainInstructions);
      if (!instructions) return std::nullopt;
      for (size_t instruction : *instructions) {
        auto type = r.field(instruction, kUnionType);
        uint8_t kind = type ? r.read<uint8_t>(*type).value_or(0) : 0;
        auto call = r.table(instruction, kUnionValue);
        if (kind == kKernelCall || kind == kDelegateCall) {
          auto args = call ? r.ints(*call, kCallArgs) : std::nullopt;
          auto index_at = call ? r.field(*call, kCallIndex) : std::nullopt;
          int32_t index = index_at ? r.read<int32_t>(*index_at).value_or(-1) : 0;
          if (!args) return std::nullopt;
          bool device = kind == kDelegateCall && index >= 0 &&
                        static_cast<size_t>(index) < device_delegate.size() &&
                        device_delegate[static_cast<size_t>(index)];
          (device ? delegate_read : cpu_read).insert(args->begin(), args->end());
        } else if (kind == kMoveCall) {
          auto from = call ? r.field(*call, 0) : std::nullopt;
          auto to = call ? r.field(*call, 1) : std::nullopt;
          if (from) cpu_read.insert(r.read<int32_t>(*from).value_or(0));
          if (to) cpu_read.insert(r.read<int32_t>(*to).value_or(0));
        }
      }
    }
    std::vector<bool> out;
    for (int32_t input : *inputs) {
      out.push_back(delegate_read.count(input) > 0 && cpu_read.count(input) == 0);
    }
    return out;
  }
  return std::nullopt;
}

}  // namespace

std::vector<bool> inputs_read_only_by_delegates(
    const uint8_t* data, size_t size, const std::string& method,
    const std::function<bool(const std::string&)>& takes_device_memory) {
  auto read = read_plan(Reader(data, size), method, takes_device_memory);
  return read ? *read : std::vector<bool>();
}

}  // namespace ethost
