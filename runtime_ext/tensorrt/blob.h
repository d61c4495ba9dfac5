// Reader for the delegate blob Torch-TensorRT writes for an ExecuTorch program (TR01/TR02).
// The same code serves the backend at load time and the service at ingest (through
// ethost_tensorrt.parse_blob), so a blob is either accepted or refused identically in both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "status.h"

namespace ethost_trt {

struct IoBinding {
  std::string name;
  bool is_input = false;
  // Written by the exporter but not filled in practice; the engine is the authority.
  std::string dtype;
  std::vector<int64_t> shape;
};

struct AliasedIo {
  std::string output;
  std::string input;
  std::string kind;  // "kv_cache_update" (default) or "user"
};

struct BlobMetadata {
  std::vector<IoBinding> io_bindings;
  std::vector<AliasedIo> aliased_io;
  bool hardware_compatible = false;
  int64_t device_id = 0;
  // Base64 of a Python pickle: kept only as a length so nothing is tempted to decode it.
  size_t serialized_metadata_size = 0;
  std::string target_platform;
  std::optional<std::string> engine_key;
};

struct ParsedBlob {
  std::string magic;
  uint32_t metadata_offset = 0;
  uint32_t metadata_size = 0;
  uint32_t engine_offset = 0;
  uint64_t engine_size = 0;
  BlobMetadata metadata;
  // Points into the parsed bytes; empty (nullptr, 0) when the engine lives in named data.
  const uint8_t* engine = nullptr;
};

constexpr size_t kBlobHeaderSize = 32;

// Which rule a refused blob breaks. The service turns each into the rule "tensorrt.<name>" of
// its catalogue (BLOB_FAULT_RULES in service/backends/tensorrt/checks.py); a test compares that
// mapping with ethost_tensorrt.blob_faults(), so a fault added here without its rule fails.
enum class BlobFault {
  Invalid,           // the layout or the metadata's form (header, offsets, JSON, field types)
  DuplicateBinding,  // a binding name used twice (also once as input and once as output)
  AliasBinding,      // an alias naming no output or no input binding
  AliasRepeated,     // an output aliased twice, or two aliases updating one input
  AliasKind,         // an alias kind other than kv_cache_update and user
  EngineAndKey,      // engine bytes and an engine_key both
};

const char* blob_fault_name(BlobFault fault);
std::vector<BlobFault> all_blob_faults();

// Why parse_blob refused: the fault, and the binding it concerns (empty when none does).
struct BlobRefusal {
  BlobFault fault = BlobFault::Invalid;
  std::string binding;
};

// The blob's layout and metadata, or an InvalidProgram status naming the refusal (and, where
// `why` is given, its fault and binding). The result points into `data` (engine). Metadata is
// read with a real JSON parser: key order, and keys' names appearing as values, do not matter.
ethost::Outcome<ParsedBlob> parse_blob(const uint8_t* data, size_t size,
                                       BlobRefusal* why = nullptr);

}  // namespace ethost_trt
