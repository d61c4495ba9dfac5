#include "blob.h"

#include <cstring>
#include <set>

#include "json.h"

namespace ethost_trt {

using executorch::runtime::Error;

namespace {

uint32_t read_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

uint64_t read_u64(const uint8_t* p) {
  return static_cast<uint64_t>(read_u32(p)) | (static_cast<uint64_t>(read_u32(p + 4)) << 32);
}

Error refuse(std::string* why, std::string reason) {
  *why = std::move(reason);
  return Error::InvalidProgram;
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

Error read_io_bindings(const JsonValue& list, BlobMetadata* meta, std::string* why) {
  if (list.kind != JsonValue::Kind::Array) return refuse(why, "metadata io_bindings is not a list");
  std::set<std::string> seen;
  for (size_t i = 0; i < list.array.size(); ++i) {
    const JsonValue& entry = list.array[i];
    std::string where = "metadata io_bindings[" + std::to_string(i) + "]";
    if (entry.kind != JsonValue::Kind::Object) return refuse(why, where + " is not an object");
    const JsonValue* name = entry.find("name");
    const JsonValue* is_input = entry.find("is_input");
    if (name == nullptr || name->kind != JsonValue::Kind::String || name->string.empty()) {
      return refuse(why, where + " has no non-empty name");
    }
    if (is_input == nullptr || is_input->kind != JsonValue::Kind::Bool) {
      return refuse(why, where + " has no boolean is_input");
    }
    if (!seen.insert(name->string).second) {
      return refuse(why, "metadata io_bindings names '" + name->string + "' twice");
    }
    IoBinding binding;
    binding.name = name->string;
    binding.is_input = is_input->boolean;
    if (const JsonValue* dtype = entry.find("dtype")) {
      if (dtype->kind == JsonValue::Kind::String) binding.dtype = dtype->string;
      else if (dtype->kind != JsonValue::Kind::Null) return refuse(why, where + " dtype is not a string");
    }
    if (const JsonValue* shape = entry.find("shape")) {
      if (!read_dims(*shape, &binding.shape)) return refuse(why, where + " shape is not a list of integers");
    }
    meta->io_bindings.push_back(std::move(binding));
  }
  return Error::Ok;
}

const IoBinding* binding_named(const BlobMetadata& meta, const std::string& name) {
  for (const auto& b : meta.io_bindings) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

Error read_aliased_io(const JsonValue& list, BlobMetadata* meta, std::string* why) {
  if (list.kind != JsonValue::Kind::Array) return refuse(why, "metadata aliased_io is not a list");
  std::set<std::string> outputs, inputs;
  for (size_t i = 0; i < list.array.size(); ++i) {
    const JsonValue& entry = list.array[i];
    std::string where = "metadata aliased_io[" + std::to_string(i) + "]";
    if (entry.kind != JsonValue::Kind::Object) return refuse(why, where + " is not an object");
    const JsonValue* output = entry.find("output");
    const JsonValue* input = entry.find("input");
    const JsonValue* kind = entry.find("kind");
    if (output == nullptr || output->kind != JsonValue::Kind::String ||
        input == nullptr || input->kind != JsonValue::Kind::String) {
      return refuse(why, where + " needs string 'output' and 'input'");
    }
    AliasedIo alias{output->string, input->string, "kv_cache_update"};
    if (kind != nullptr && kind->kind != JsonValue::Kind::Null) {
      if (kind->kind != JsonValue::Kind::String ||
          (kind->string != "kv_cache_update" && kind->string != "user")) {
        return refuse(why, where + " kind must be 'kv_cache_update' or 'user'");
      }
      alias.kind = kind->string;
    }
    const IoBinding* out_binding = binding_named(*meta, alias.output);
    const IoBinding* in_binding = binding_named(*meta, alias.input);
    if (out_binding == nullptr || out_binding->is_input) {
      return refuse(why, where + " output '" + alias.output + "' is not an output binding");
    }
    if (in_binding == nullptr || !in_binding->is_input) {
      return refuse(why, where + " input '" + alias.input + "' is not an input binding");
    }
    // One buffer cannot receive two in-place updates, nor one output update two buffers.
    if (!outputs.insert(alias.output).second || !inputs.insert(alias.input).second) {
      return refuse(why, where + " repeats an output or input of another alias");
    }
    meta->aliased_io.push_back(std::move(alias));
  }
  return Error::Ok;
}

Error read_metadata(const std::string& text, BlobMetadata* meta, std::string* why) {
  JsonValue root;
  std::string json_error;
  if (!parse_json(text, &root, &json_error)) {
    return refuse(why, "metadata is not valid JSON: " + json_error);
  }
  if (root.kind != JsonValue::Kind::Object) return refuse(why, "metadata is not a JSON object");
  const JsonValue* io = root.find("io_bindings");
  if (io == nullptr) return refuse(why, "metadata has no io_bindings");
  Error err = read_io_bindings(*io, meta, why);
  if (err != Error::Ok) return err;
  if (const JsonValue* aliased = root.find("aliased_io")) {
    err = read_aliased_io(*aliased, meta, why);
    if (err != Error::Ok) return err;
  }
  if (const JsonValue* v = root.find("hardware_compatible")) {
    if (v->kind != JsonValue::Kind::Bool) return refuse(why, "metadata hardware_compatible is not a boolean");
    meta->hardware_compatible = v->boolean;
  }
  if (const JsonValue* v = root.find("device_id")) {
    if (v->kind != JsonValue::Kind::Number || !v->is_integer || v->integer < 0) {
      return refuse(why, "metadata device_id is not a non-negative integer");
    }
    meta->device_id = v->integer;
  }
  if (const JsonValue* v = root.find("serialized_metadata")) {
    if (v->kind != JsonValue::Kind::String && v->kind != JsonValue::Kind::Null) {
      return refuse(why, "metadata serialized_metadata is not a string");
    }
    meta->serialized_metadata_size = v->string.size();
  }
  if (const JsonValue* v = root.find("target_platform")) {
    if (v->kind != JsonValue::Kind::String && v->kind != JsonValue::Kind::Null) {
      return refuse(why, "metadata target_platform is not a string");
    }
    meta->target_platform = v->string;
  }
  if (const JsonValue* v = root.find("engine_key")) {
    if (v->kind != JsonValue::Kind::String || v->string.empty()) {
      return refuse(why, "metadata engine_key is not a non-empty string");
    }
    meta->engine_key = v->string;
  }
  return Error::Ok;
}

}  // namespace

Error parse_blob(const uint8_t* data, size_t size, ParsedBlob* out, std::string* why) {
  *out = ParsedBlob();
  if (data == nullptr || size < kBlobHeaderSize) {
    return refuse(why, "blob is " + std::to_string(size) + " bytes, shorter than its 32-byte header");
  }
  out->magic.assign(reinterpret_cast<const char*>(data), 4);
  bool tr02 = out->magic == "TR02";
  if (out->magic != "TR01" && !tr02) {
    return refuse(why, "blob magic is not TR01 or TR02 (this reader knows no other version)");
  }
  out->metadata_offset = read_u32(data + 4);
  out->metadata_size = read_u32(data + 8);
  out->engine_offset = read_u32(data + 12);
  out->engine_size = read_u64(data + 16);
  if (out->metadata_offset < kBlobHeaderSize) {
    return refuse(why, "blob metadata_offset " + std::to_string(out->metadata_offset) +
                           " lies inside the 32-byte header");
  }
  if (out->engine_offset % 16 != 0) {
    return refuse(why, "blob engine_offset " + std::to_string(out->engine_offset) +
                           " is not a multiple of 16");
  }
  if (out->metadata_offset > size || out->metadata_size > size - out->metadata_offset) {
    return refuse(why, "blob metadata runs past the end of the blob");
  }
  if (out->engine_offset > size || out->engine_size > size - out->engine_offset) {
    return refuse(why, "blob engine runs past the end of the blob");
  }
  if (static_cast<uint64_t>(out->metadata_offset) + out->metadata_size > out->engine_offset) {
    return refuse(why, "blob metadata ends after engine_offset");
  }
  std::string text(reinterpret_cast<const char*>(data + out->metadata_offset), out->metadata_size);
  Error err = read_metadata(text, &out->metadata, why);
  if (err != Error::Ok) return err;
  if (tr02 && out->metadata.aliased_io.empty()) {
    return refuse(why, "blob is TR02 but its metadata has no aliased_io");
  }
  bool has_key = out->metadata.engine_key.has_value();
  if (out->engine_size > 0 && has_key) {
    return refuse(why, "blob carries engine bytes and also an engine_key");
  }
  if (out->engine_size == 0 && !has_key) {
    return refuse(why, "blob has neither engine bytes nor an engine_key");
  }
  if (out->engine_size > 0) out->engine = data + out->engine_offset;
  return Error::Ok;
}

}  // namespace ethost_trt
