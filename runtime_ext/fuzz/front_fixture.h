// The model table and the front the fuzz targets drive: one model per datatype ("fp32", "int8",
// ...; input "x" [2, 3] dynamic, outputs "y" of the same type and the scalar "s"), "tiny"
// (batched FP32, two outputs), "pair" (two named inputs, outputs of four types) and "wide", whose
// dynamic bounds are 2^31 - 1 so that shapes whose byte counts overflow get through binding to
// the code after it. make_corpus.py writes its seeds against this table. The arena is a heap
// block of exactly the slots' size, so a read or write past it is a sanitizer finding.
#pragma once

#include "front_lane.h"
#include "wire.h"

#include <array>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace fuzz_fixture {

using namespace etrt_front;

constexpr uint64_t kArenaBytes = 1 << 20;
constexpr uint64_t kGeneration = 9;
constexpr int64_t kWide = (int64_t{1} << 31) - 1;

inline TensorSpec spec(std::string name, Datatype type, std::vector<int64_t> shape, bool dynamic,
                       bool tensor = true) {
  TensorSpec s;
  s.name = std::move(name);
  s.datatype = type;
  s.shape = std::move(shape);
  s.dynamic = dynamic;
  s.tensor = tensor;
  return s;
}

inline void add(FrontTable& table, std::string model, std::string version, int64_t max_batch,
                MethodEntry method) {
  auto entry = std::make_shared<ModelEntry>();
  entry->version = std::move(version);
  entry->max_batch = max_batch;
  entry->methods.emplace(method.name, std::move(method));
  table.versions[{model, entry->version}] = entry;
  table.defaults[model] = entry;
}

inline std::shared_ptr<const FrontTable> table() {
  auto table = std::make_shared<FrontTable>();
  table->generation = kGeneration;
  uint32_t route = 1;
  for (const DatatypeInfo& info : kDatatypes) {
    std::string model(info.name);
    for (char& c : model) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    MethodEntry m;
    m.name = "forward";
    m.route = route++;
    m.inputs = {spec("x", info.type, {2, 3}, true)};
    m.outputs = {spec("y", info.type, {2, 3}, true), spec("s", Datatype::I64, {}, false, false)};
    add(*table, model, "1", 0, std::move(m));
  }
  MethodEntry tiny;
  tiny.name = "forward";
  tiny.route = route++;
  tiny.inputs = {spec("input_0", Datatype::F32, {4, 8}, true)};
  tiny.outputs = {spec("output_0", Datatype::F32, {4, 8}, true),
                  spec("output_1", Datatype::I64, {4}, true)};
  add(*table, "tiny", "3", 4, std::move(tiny));
  MethodEntry pair;
  pair.name = "forward";
  pair.route = route++;
  pair.inputs = {spec("a", Datatype::I32, {4}, false), spec("b", Datatype::Bool, {4}, false)};
  pair.outputs = {spec("h", Datatype::F16, {4}, false), spec("g", Datatype::BF16, {4}, false),
                  spec("d", Datatype::F64, {4}, false), spec("u", Datatype::U8, {4}, false)};
  add(*table, "pair", "1", 0, std::move(pair));
  MethodEntry wide;
  wide.name = "forward";
  wide.route = route++;
  wide.inputs = {spec("x", Datatype::F32, {kWide, kWide, kWide}, true)};
  wide.outputs = {spec("y", Datatype::F32, {kWide}, true)};
  add(*table, "wide", "1", 0, std::move(wide));
  return table;
}

// A front over its own arena of `arena_bytes`, engine serving at the table's generation; with a
// `token`, inference needs "Bearer <token>".
struct Front {
  explicit Front(const char* token = nullptr, uint64_t arena_bytes = kArenaBytes)
      : arena(arena_bytes), slots(std::make_shared<Slots>(arena_bytes, nullptr, arena_bytes)) {
    FrontConfig config;
    config.max_native_body = 64 * 1024;
    config.max_v2_body = 256 * 1024;
    config.max_json = 64 * 1024;
    config.max_streamed_body = 512 * 1024;
    config.has_token = token != nullptr;
    config.token = token != nullptr ? token : "";
    lane = std::make_unique<FrontLane>(std::move(config), slots, arena.data(), control);
    lane->publish(table());
  }

  std::vector<uint8_t> arena;
  std::shared_ptr<Slots> slots;
  uint64_t control[3] = {kGeneration, 1, 1};  // generation, ready, serving
  std::unique_ptr<FrontLane> lane;
};

// A finding that is not a sanitizer's: the fuzz run stops here with the input that broke it.
inline void require(bool holds, const char* what) {
  if (!holds) {
    std::fprintf(stderr, "invariant broken: %s\n", what);
    std::abort();
  }
}

inline const MethodEntry* method_of(uint32_t route) {
  static std::shared_ptr<const FrontTable> table = fuzz_fixture::table();
  for (const auto& [key, entry] : table->versions) {
    for (const auto& [name, method] : entry->methods) {
      if (method.route == route) return &method;
    }
  }
  return nullptr;
}

// A taken request's lane message reads back (the engine's reader, wire.h) under its id, with
// its inputs one after another before its room, inside the arena.
inline void check_message(const FrontLane::Taken& taken) {
  auto message = ethost::lane::read_request(reinterpret_cast<const uint8_t*>(taken.message.data()),
                                            taken.message.size());
  require(message.ok(), "its lane message reads back");
  const ethost::lane::InferRequest& lane = message.value();
  require(lane.request_id == taken.id, "under its id");
  uint64_t room_end = lane.room_offset + lane.room_size;
  require(lane.room_offset <= room_end && room_end <= fuzz_fixture::kArenaBytes,
          "its room lies in the arena");
  const MethodEntry* method = method_of(lane.route);
  require(method != nullptr && lane.input_count == method->inputs.size(), "a route's inputs");
  // Inputs in clients' regions: named once each by a reference, their byte size theirs.
  std::array<const ethost::lane::WireShmRef*, kMaxInputs> in_region{};
  for (const ethost::lane::WireShmRef& ref : lane.refs) {
    require(ref.output ? ref.tensor < method->outputs.size() && (lane.outputs >> ref.tensor & 1)
                       : ref.tensor < lane.input_count && in_region[ref.tensor] == nullptr,
            "a reference names a tensor of the request");
    if (!ref.output) in_region[ref.tensor] = &ref;
  }
  uint64_t end = 0;
  bool first = true;
  for (size_t i = 0; i < lane.input_count; ++i) {
    const ethost::lane::WireInput& input = lane.inputs[i];
    uint64_t nbytes = info_of(method->inputs[i].datatype).size;
    for (size_t d = 0; d < input.ndim; ++d) {
      require(input.dims[d] >= 0, "dimensions are sizes");
      require(!__builtin_mul_overflow(nbytes, static_cast<uint64_t>(input.dims[d]), &nbytes),
              "an input's byte count fits in 64 bits");
    }
    if (in_region[i] != nullptr) {
      require(input.offset == 0 && in_region[i]->byte_size == nbytes, "an input in its region");
      continue;
    }
    if (first) end = input.offset;
    first = false;
    require(input.offset >= end && input.offset <= lane.room_offset &&
                nbytes <= lane.room_offset - input.offset,
            "its inputs lie one after another before its room");
    end = input.offset + nbytes;
  }
}

}  // namespace fuzz_fixture
