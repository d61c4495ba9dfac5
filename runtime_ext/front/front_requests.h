// Request bodies of the fronts' native path: the server's own `POST /infer` JSON, and the Open
// Inference Protocol's REST infer (JSON, or a JSON header followed by binary tensors). Read into
// what they give (GivenRequest), checked against the model table as the Python path checks them
// (service/dataplane/signature.py), and their tensors written into an arena slot.
//
// Only what the Python path would accept and send to the engine as a lane request is taken; for
// everything else (any error, any feature these readers leave out: request parameters, tensor
// parameters other than binary data and shared memory references, nested or non-finite JSON
// data, FP16/BF16 JSON data, escapes in strings) they decline, and the Python path reads the
// request from its first byte as before.
#pragma once

#include "contract_limits.h"
#include "front_table.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace etrt_front {

enum class Protocol : uint8_t { Native, V2, Grpc };

using ethost::limits::kMaxDim;
using ethost::limits::kMaxDims;
using ethost::limits::kMaxInputs;
using ethost::limits::kMaxOutputs;

// A tensor in a client's shared memory region: its parameters shared_memory_region,
// shared_memory_offset (0 unless given) and shared_memory_byte_size (service/shm/refs.py).
struct RegionRef {
  std::string_view region;  // empty: the tensor is not in a region
  uint64_t offset = 0;
  uint64_t byte_size = 0;
  bool named() const { return !region.empty(); }
};

struct GivenInput {
  std::string_view name;
  bool named = false;
  const DatatypeInfo* datatype = nullptr;
  size_t ndim = 0;
  std::array<int64_t, kMaxDims> dims{};
  uint64_t count = 1;  // elements
  // Its values: raw little-endian bytes in the body (binary), else the text of its JSON list.
  const uint8_t* bytes = nullptr;
  const char* data_begin = nullptr;
  const char* data_end = nullptr;
  RegionRef shm;  // named: no values in the request, `byte_size` bytes in the region
};

// An output asked for (v2): binary_data (-1: unset), and the region it is to be written into.
struct GivenOutput {
  std::string_view name;
  int8_t binary = -1;
  RegionRef shm;
};

struct GivenRequest {
  Protocol protocol = Protocol::Native;
  std::string_view model, version, method = "forward";
  bool has_id = false;
  std::string_view id;  // v2 "id", echoed (plain ASCII without escapes, as read)
  std::vector<GivenInput> inputs;
  bool all_outputs = true;
  // Asked-for outputs (v2, or the native API's, which has none).
  std::vector<GivenOutput> outputs;
  // A v2 binary body may be read before it has arrived whole: `available` bytes of it are here
  // (set by the caller; the JSON header must be among them, and no BOOL input is taken so, as
  // its bytes are checked). `payload`: where the binary tensors begin (set by read_v2).
  size_t available = SIZE_MAX;
  const uint8_t* payload = nullptr;
};

// The native API's body (service/front/protocols/native/infer_body.py).
bool read_native(const char* body, size_t size, GivenRequest& request);
// The v2 body; `binary_header`: Inference-Header-Content-Length's value, or null without one.
// `max_json`: the longest JSON (header) the server accepts. `size` is the whole body's length,
// of which request.available bytes are at `body`. An input in a shared memory region has no
// values in the body, and its region byte size must be its tensor's (else declined).
bool read_v2(const char* body, size_t size, const std::string_view* binary_header,
             uint64_t max_json, GivenRequest& request);

// The method inputs in the method's order, checked against their specs (names or positions,
// datatypes, shapes); false for anything the Python path would refuse.
bool bind(const GivenRequest& request, const MethodEntry& method,
          std::array<const GivenInput*, kMaxInputs>& ordered);

// The asked-for outputs as a mask of method output indices; false unless they are known, each
// asked once, and in the method's order (the lane answers in that order).
bool output_mask(const GivenRequest& request, const MethodEntry& method, uint64_t& mask);

// Writes the input's values into `into` (its bytes: count x datatype size); false when a JSON
// value does not convert exactly as the Python path converts it (left to that path). A binary
// input's bytes must have arrived; an input in a region has none to write.
bool write_values(const GivenInput& input, uint8_t* into);

}  // namespace etrt_front
