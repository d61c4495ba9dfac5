#include "blob.h"

#include <cstring>
#include <set>

#include "json.h"

namespace ethost_trt {

using ethost::Error;
using ethost::Outcome;
using ethost::Status;

namespace {

uint32_t read_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

uint64_t read_u64(const uint8_t* p) {
  return static_cast<uint64_t>(read_u32(p)) | (static_cast<uint64_t>(read_u32(p + 4)) << 32);
}

bool read_dims(const JsonValue& v, std::vector<int64_t>* out) {
  if (v.kind == JsonValue::Kind::Null) return true;
  if (v.kind != JsonValue::Kind::Array) return false;
  for (const auto& d : v.array) {
    if (d.kind != JsonValue::Kind::Number || !d.is_integer) return false;
    out->push_back(d.integer);
  }
  return true;
}

const IoBinding* binding_named(const BlobMetadata& meta, const std::string& name) {
  for (const auto& b : meta.io_bindings) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

// One parse: every refusal goes through refuse(), which records its fault for the caller.
class Reader {
 public:
  explicit Reader(BlobRefusal* why) : why_(why) {}

  Status refuse(std::string reason, BlobFault fault = BlobFault::Invalid,
                std::string binding = "") {
    if (why_ != nullptr) *why_ = BlobRefusal{fault, std::move(binding)};
    return Status(Error::InvalidProgram, std::move(reason));
  }

  Status read_io_bindings(const JsonValue& list, BlobMetadata* meta) {
    if (list.kind != JsonValue::Kind::Array) return refuse("metadata io_bindings is not a list");
    std::set<std::string> inputs, outputs;
    for (size_t i = 0; i < list.array.size(); ++i) {
      const JsonValue& entry = list.array[i];
      std::string where = "metadata io_bindings[" + std::to_string(i) + "]";
      if (entry.kind != JsonValue::Kind::Object) return refuse(where + " is not an object");
      const JsonValue* name = entry.find("name");
      const JsonValue* is_input = entry.find("is_input");
      if (name == nullptr || name->kind != JsonValue::Kind::String || name->string.empty()) {
        return refuse(where + " has no non-empty name");
      }
      if (is_input == nullptr || is_input->kind != JsonValue::Kind::Bool) {
        return refuse(where + " has no boolean is_input");
      }
      const std::string& n = name->string;
      bool input = is_input->boolean;
      if ((input ? inputs : outputs).count(n) != 0) {
        return refuse("metadata io_bindings names the " + std::string(input ? "input" : "output") +
                          " '" + n + "' twice",
                      BlobFault::DuplicateBinding, n);
      }
      if ((input ? outputs : inputs).count(n) != 0) {
        return refuse("metadata io_bindings names '" + n + "' twice, as an input and an output",
                      BlobFault::DuplicateBinding, n);
      }
      (input ? inputs : outputs).insert(n);
      IoBinding binding;
      binding.name = n;
      binding.is_input = input;
      if (const JsonValue* dtype = entry.find("dtype")) {
        if (dtype->kind == JsonValue::Kind::String)
          binding.dtype = dtype->string;
        else if (dtype->kind != JsonValue::Kind::Null)
          return refuse(where + " dtype is not a string");
      }
      if (const JsonValue* shape = entry.find("shape")) {
        if (!read_dims(*shape, &binding.shape))
          return refuse(where + " shape is not a list of integers");
      }
      meta->io_bindings.push_back(std::move(binding));
    }
    return Status();
  }

  Status read_aliased_io(const JsonValue& list, BlobMetadata* meta) {
    if (list.kind != JsonValue::Kind::Array) return refuse("metadata aliased_io is not a list");
    std::set<std::string> outputs, inputs;
    for (size_t i = 0; i < list.array.size(); ++i) {
      const JsonValue& entry = list.array[i];
      std::string where = "metadata aliased_io[" + std::to_string(i) + "]";
      if (entry.kind != JsonValue::Kind::Object) return refuse(where + " is not an object");
      const JsonValue* output = entry.find("output");
      const JsonValue* input = entry.find("input");
      const JsonValue* kind = entry.find("kind");
      if (output == nullptr || output->kind != JsonValue::Kind::String || input == nullptr ||
          input->kind != JsonValue::Kind::String) {
        return refuse(where + " needs string 'output' and 'input'");
      }
      AliasedIo alias{output->string, input->string, "kv_cache_update"};
      if (kind != nullptr && kind->kind != JsonValue::Kind::Null) {
        if (kind->kind != JsonValue::Kind::String ||
            (kind->string != "kv_cache_update" && kind->string != "user")) {
          return refuse(
              where + " (output '" + alias.output + "') kind must be 'kv_cache_update' or 'user'",
              BlobFault::AliasKind, alias.output);
        }
        alias.kind = kind->string;
      }
      const IoBinding* out_binding = binding_named(*meta, alias.output);
      const IoBinding* in_binding = binding_named(*meta, alias.input);
      if (out_binding == nullptr || out_binding->is_input) {
        return refuse(where + " output '" + alias.output + "' is not an output binding",
                      BlobFault::AliasBinding, alias.output);
      }
      if (in_binding == nullptr || !in_binding->is_input) {
        return refuse(where + " input '" + alias.input + "' is not an input binding",
                      BlobFault::AliasBinding, alias.input);
      }
      // One buffer cannot receive two in-place updates, nor one output update two buffers.
      if (!outputs.insert(alias.output).second) {
        return refuse(where + " aliases output '" + alias.output + "' a second time",
                      BlobFault::AliasRepeated, alias.output);
      }
      if (!inputs.insert(alias.input).second) {
        return refuse(where + " updates input '" + alias.input + "', which another alias updates",
                      BlobFault::AliasRepeated, alias.input);
      }
      meta->aliased_io.push_back(std::move(alias));
    }
    return Status();
  }

  Status read_metadata(const std::string& text, BlobMetadata* meta) {
    auto parsed = parse_json(text);
    if (!parsed.ok()) return refuse("metadata is not valid JSON: " + parsed.status().reason);
    const JsonValue& root = parsed.value();
    if (root.kind != JsonValue::Kind::Object) return refuse("metadata is not a JSON object");
    const JsonValue* io = root.find("io_bindings");
    if (io == nullptr) return refuse("metadata has no io_bindings");
    ETHOST_RETURN_IF_ERROR(read_io_bindings(*io, meta));
    if (const JsonValue* aliased = root.find("aliased_io")) {
      ETHOST_RETURN_IF_ERROR(read_aliased_io(*aliased, meta));
    }
    if (const JsonValue* v = root.find("hardware_compatible")) {
      if (v->kind != JsonValue::Kind::Bool)
        return refuse("metadata hardware_compatible is not a boolean");
      meta->hardware_compatible = v->boolean;
    }
    if (const JsonValue* v = root.find("device_id")) {
      // Beyond int32 a device id would wrap into a real, wrong GPU where it is narrowed.
      if (v->kind != JsonValue::Kind::Number || !v->is_integer || v->integer < 0 ||
          v->integer > INT32_MAX) {
        return refuse("metadata device_id is not a non-negative 32-bit integer");
      }
      meta->device_id = v->integer;
    }
    if (const JsonValue* v = root.find("serialized_metadata")) {
      if (v->kind != JsonValue::Kind::String && v->kind != JsonValue::Kind::Null) {
        return refuse("metadata serialized_metadata is not a string");
      }
      meta->serialized_metadata_size = v->string.size();
    }
    if (const JsonValue* v = root.find("target_platform")) {
      if (v->kind != JsonValue::Kind::String && v->kind != JsonValue::Kind::Null) {
        return refuse("metadata target_platform is not a string");
      }
      meta->target_platform = v->string;
    }
    if (const JsonValue* v = root.find("engine_key")) {
      if (v->kind != JsonValue::Kind::String || v->string.empty()) {
        return refuse("metadata engine_key is not a non-empty string");
      }
      meta->engine_key = v->string;
    }
    return Status();
  }

  Outcome<ParsedBlob> parse(const uint8_t* data, size_t size);

 private:
  BlobRefusal* why_;
};

Outcome<ParsedBlob> Reader::parse(const uint8_t* data, size_t size) {
  ParsedBlob blob;
  ParsedBlob* out = &blob;
  if (data == nullptr || size < kBlobHeaderSize) {
    return refuse("blob is " + std::to_string(size) + " bytes, shorter than its 32-byte header");
  }
  out->magic.assign(reinterpret_cast<const char*>(data), 4);
  bool tr02 = out->magic == "TR02";
  if (out->magic != "TR01" && !tr02) {
    return refuse("blob magic is not TR01 or TR02 (this reader knows no other version)");
  }
  out->metadata_offset = read_u32(data + 4);
  out->metadata_size = read_u32(data + 8);
  out->engine_offset = read_u32(data + 12);
  out->engine_size = read_u64(data + 16);
  if (out->metadata_offset < kBlobHeaderSize) {
    return refuse("blob metadata_offset " + std::to_string(out->metadata_offset) +
                  " lies inside the 32-byte header");
  }
  if (out->engine_offset % 16 != 0) {
    return refuse("blob engine_offset " + std::to_string(out->engine_offset) +
                  " is not a multiple of 16");
  }
  if (out->metadata_offset > size || out->metadata_size > size - out->metadata_offset) {
    return refuse("blob metadata runs past the end of the blob");
  }
  if (out->engine_offset > size || out->engine_size > size - out->engine_offset) {
    return refuse("blob engine runs past the end of the blob");
  }
  if (static_cast<uint64_t>(out->metadata_offset) + out->metadata_size > out->engine_offset) {
    return refuse("blob metadata ends after engine_offset");
  }
  std::string text(reinterpret_cast<const char*>(data + out->metadata_offset), out->metadata_size);
  ETHOST_RETURN_IF_ERROR(read_metadata(text, &out->metadata));
  if (tr02 && out->metadata.aliased_io.empty()) {
    return refuse("blob is TR02 but its metadata has no aliased_io");
  }
  bool has_key = out->metadata.engine_key.has_value();
  if (out->engine_size > 0 && has_key) {
    return refuse("blob carries engine bytes and also an engine_key ('" +
                      *out->metadata.engine_key + "'): one of them must go",
                  BlobFault::EngineAndKey);
  }
  if (out->engine_size == 0 && !has_key) {
    return refuse("blob has neither engine bytes nor an engine_key");
  }
  if (out->engine_size > 0) out->engine = data + out->engine_offset;
  return blob;
}

}  // namespace

const char* blob_fault_name(BlobFault fault) {
  switch (fault) {
    case BlobFault::Invalid: return "blob_invalid";
    case BlobFault::DuplicateBinding: return "duplicate_binding";
    case BlobFault::AliasBinding: return "alias_binding";
    case BlobFault::AliasRepeated: return "alias_repeated";
    case BlobFault::AliasKind: return "alias_kind";
    case BlobFault::EngineAndKey: return "engine_and_key";
  }
  return "blob_invalid";
}

std::vector<BlobFault> all_blob_faults() {
  return {BlobFault::Invalid,       BlobFault::DuplicateBinding, BlobFault::AliasBinding,
          BlobFault::AliasRepeated, BlobFault::AliasKind,        BlobFault::EngineAndKey};
}

Outcome<ParsedBlob> parse_blob(const uint8_t* data, size_t size, BlobRefusal* why) {
  return Reader(why).parse(data, size);
}

}  // namespace ethost_trt
