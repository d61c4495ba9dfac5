// The reader of Torch-TensorRT's delegate blob (TR01/TR02): the layout it accepts and each
// refusal, with the reason the service quotes to whoever uploaded the program.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "blob.h"
#include "check.h"
#include "test_blobs.h"

using ethost_test::blob;
using ethost_test::Layout;
using ethost_test::put_u32;
using ethost_trt::parse_blob;

namespace {

const char* kIo =
    R"({"io_bindings": [{"name": "x", "is_input": true, "dtype": "float32", "shape": [2, -1]},)"
    R"( {"name": "y", "is_input": false}])";

std::string meta(const std::string& extra = "") {
  return std::string(kIo) + extra + "}";
}

std::string refusal(const std::vector<uint8_t>& b) {
  auto parsed = parse_blob(b.data(), b.size());
  if (parsed.ok()) return "(accepted)";
  CHECK(parsed.status().code == ethost::Error::InvalidProgram);
  return parsed.status().reason;
}

}  // namespace

TEST(an_inline_engine_blob_is_read) {
  auto b =
      blob(meta(R"(, "device_id": 1, "hardware_compatible": true, "target_platform": "linux")"),
           "ENGINE-BYTES");
  auto parsed = parse_blob(b.data(), b.size());
  CHECK(parsed.ok());
  const auto& p = parsed.value();
  CHECK(p.magic == "TR01" && p.metadata_offset == 32 && p.engine_size == 12);
  CHECK(p.engine == b.data() + p.engine_offset && p.engine_offset % 16 == 0);
  CHECK(std::string(reinterpret_cast<const char*>(p.engine), 12) == "ENGINE-BYTES");
  const auto& m = p.metadata;
  CHECK(m.io_bindings.size() == 2 && m.io_bindings[0].name == "x" && m.io_bindings[0].is_input);
  CHECK(m.io_bindings[0].dtype == "float32");
  CHECK((m.io_bindings[0].shape == std::vector<int64_t>{2, -1}));
  CHECK(!m.io_bindings[1].is_input && m.io_bindings[1].dtype.empty());
  CHECK(m.device_id == 1 && m.hardware_compatible && m.target_platform == "linux");
  CHECK(!m.engine_key.has_value());
}

TEST(an_engine_in_named_data_is_found_by_key) {
  auto b = blob(meta(R"(, "engine_key": "k_trt_engine")"), "");
  auto parsed = parse_blob(b.data(), b.size());
  CHECK(parsed.ok() && parsed.value().engine == nullptr);
  CHECK(parsed.ok() && *parsed.value().metadata.engine_key == "k_trt_engine");
}

TEST(tr02_carries_in_place_aliases) {
  const char* io =
      R"({"io_bindings": [{"name": "cache", "is_input": true}, {"name": "out", "is_input": false}],)"
      R"( "aliased_io": [{"output": "out", "input": "cache"}]})";
  Layout tr02;
  tr02.magic = "TR02";
  auto b = blob(io, "E", tr02);
  auto parsed = parse_blob(b.data(), b.size());
  CHECK(parsed.ok());
  CHECK(parsed.ok() && parsed.value().metadata.aliased_io.size() == 1);
  CHECK(parsed.ok() && parsed.value().metadata.aliased_io[0].kind == "kv_cache_update");
  CHECK_CONTAINS(refusal(blob(meta(), "E", tr02)), "TR02 but its metadata has no aliased_io");
}

TEST(the_header_is_checked_before_anything_is_read) {
  std::vector<uint8_t> short_blob(31, 0);
  CHECK_CONTAINS(refusal(short_blob), "31 bytes, shorter than its 32-byte header");
  Layout bad_magic;
  bad_magic.magic = "TR09";
  CHECK_CONTAINS(refusal(blob(meta(), "E", bad_magic)), "magic is not TR01 or TR02");
  Layout inside_header;
  inside_header.metadata_offset = 16;
  CHECK_CONTAINS(refusal(blob(meta(), "E", inside_header)), "lies inside the 32-byte header");
  Layout unaligned;
  unaligned.engine_offset = 8 * 1024 + 8;
  CHECK_CONTAINS(refusal(blob(meta(), "E", unaligned)), "is not a multiple of 16");
  Layout past_end;
  past_end.engine_size = 1 << 20;
  CHECK_CONTAINS(refusal(blob(meta(), "E", past_end)), "engine runs past the end of the blob");
  auto truncated = blob(meta(), "");
  put_u32(truncated, 8, 1 << 20);
  CHECK_CONTAINS(refusal(truncated), "metadata runs past the end of the blob");
}

TEST(metadata_refusals_name_the_field) {
  CHECK_CONTAINS(refusal(blob("{not json", "E")), "metadata is not valid JSON");
  CHECK_CONTAINS(refusal(blob("[]", "E")), "metadata is not a JSON object");
  CHECK_CONTAINS(refusal(blob("{}", "E")), "metadata has no io_bindings");
  CHECK_CONTAINS(refusal(blob(R"({"io_bindings": [{"name": "x", "is_input": true},)"
                              R"( {"name": "x", "is_input": false}]})",
                              "E")),
                 "names 'x' twice, as an input and an output");
  CHECK_CONTAINS(refusal(blob(R"({"io_bindings": [{"name": "", "is_input": true}]})", "E")),
                 "io_bindings[0] has no non-empty name");
  CHECK_CONTAINS(
      refusal(blob(R"({"io_bindings": [{"name": "x", "is_input": true, "shape": [1.5]}]})", "E")),
      "shape is not a list of integers");
  CHECK_CONTAINS(refusal(blob(meta(R"(, "device_id": -1)"), "E")),
                 "device_id is not a non-negative 32-bit integer");
  CHECK_CONTAINS(refusal(blob(meta(R"(, "device_id": 4294967296)"), "E")),
                 "device_id is not a non-negative 32-bit integer");
  CHECK_CONTAINS(refusal(blob(meta(R"(, "aliased_io": [{"output": "x", "input": "y"}])"), "E")),
                 "output 'x' is not an output binding");
  CHECK_CONTAINS(refusal(blob(meta(R"(, "engine_key": "k")"), "E")),
                 "carries engine bytes and also an engine_key");
  CHECK_CONTAINS(refusal(blob(meta(), "")), "neither engine bytes nor an engine_key");
}

namespace {

ethost_trt::BlobRefusal fault_of(const std::string& metadata, const std::string& engine = "E") {
  auto b = blob(metadata, engine);
  ethost_trt::BlobRefusal why;
  auto parsed = parse_blob(b.data(), b.size(), &why);
  CHECK(!parsed.ok());
  return why;
}

}  // namespace

TEST(each_refusal_names_its_fault_and_binding) {
  using ethost_trt::BlobFault;
  auto dup = fault_of(
      R"({"io_bindings": [{"name": "x", "is_input": true}, {"name": "x", "is_input": true}]})");
  CHECK(dup.fault == BlobFault::DuplicateBinding && dup.binding == "x");
  auto twice = fault_of(meta(R"(, "aliased_io": [{"output": "y", "input": "x"},)"
                             R"( {"output": "y", "input": "x"}])"));
  CHECK(twice.fault == BlobFault::AliasRepeated && twice.binding == "y");
  auto kind = fault_of(meta(R"(, "aliased_io": [{"output": "y", "input": "x", "kind": "z"}])"));
  CHECK(kind.fault == BlobFault::AliasKind && kind.binding == "y");
  auto unknown = fault_of(meta(R"(, "aliased_io": [{"output": "y", "input": "w"}])"));
  CHECK(unknown.fault == BlobFault::AliasBinding && unknown.binding == "w");
  auto both = fault_of(meta(R"(, "engine_key": "k")"));
  CHECK(both.fault == BlobFault::EngineAndKey && both.binding.empty());
  auto layout = fault_of("{not json");
  CHECK(layout.fault == BlobFault::Invalid);
  CHECK(std::string(ethost_trt::blob_fault_name(BlobFault::AliasKind)) == "alias_kind");
  CHECK(ethost_trt::all_blob_faults().size() == 6);
}

TEST(key_order_and_keys_spelled_as_values_do_not_change_what_is_read) {
  // Sorted keys, aliases last, a binding named device_id and values spelled like keys.
  const char* sorted =
      R"({"aliased_io": [{"input": "device_id", "kind": "user", "output": "aliased_io"}],)"
      R"( "device_id": 2, "engine_key": "k", "hardware_compatible": true,)"
      R"( "io_bindings": [{"is_input": true, "name": "device_id", "shape": [1]},)"
      R"( {"dtype": "float32", "is_input": false, "name": "aliased_io"}],)"
      R"( "serialized_metadata": "device_id", "target_platform": "io_bindings"})";
  Layout tr02;
  tr02.magic = "TR02";
  auto b = blob(sorted, "", tr02);
  auto parsed = parse_blob(b.data(), b.size());
  CHECK(parsed.ok());
  if (!parsed.ok()) return;
  const auto& m = parsed.value().metadata;
  CHECK(m.device_id == 2 && m.hardware_compatible && m.target_platform == "io_bindings");
  CHECK(m.io_bindings.size() == 2 && m.io_bindings[0].name == "device_id");
  CHECK(m.aliased_io.size() == 1 && m.aliased_io[0].output == "aliased_io");
  CHECK(m.aliased_io[0].input == "device_id" && m.aliased_io[0].kind == "user");
}
