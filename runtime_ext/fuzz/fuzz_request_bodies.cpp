// The request body readers (front_requests.h): the native API's JSON, v2 JSON and v2 binary.
// Input: one byte choosing the reader (0 native, 1 v2 JSON, 2 v2 binary), then the body; for
// binary, the Inference-Header-Content-Length value and a '\n' come first. What a reader takes
// must be consistent (every byte count fits in 64 bits, binary tensors lie inside the body), and
// once bound to a method of the table its values are written into a block of exactly its size.
#include "front_fixture.h"
#include "front_requests.h"

#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

using namespace etrt_front;
using fuzz_fixture::require;

namespace {

const FrontTable& the_table() {
  static std::shared_ptr<const FrontTable> table = fuzz_fixture::table();
  return *table;
}

// The input's byte count, checked the long way: its dimensions' product times its type's size.
bool byte_count(const GivenInput& input, uint64_t& nbytes) {
  nbytes = input.datatype->size;
  uint64_t count = 1;
  for (size_t d = 0; d < input.ndim; ++d) {
    if (input.dims[d] < 0) return false;
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(input.dims[d]), &count)) return false;
  }
  return count == input.count && !__builtin_mul_overflow(count, nbytes, &nbytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  if (size < 1) return 0;
  int mode = bytes[0] % 3;
  const char* body = reinterpret_cast<const char*>(bytes) + 1;
  size_t body_size = size - 1;
  std::string_view header;
  if (mode == 2) {
    const char* newline = static_cast<const char*>(std::memchr(body, '\n', body_size));
    if (newline == nullptr) return 0;
    header = std::string_view(body, static_cast<size_t>(newline - body));
    body_size -= header.size() + 1;
    body = newline + 1;
  }
  // The body in a block of its own size, so that reading past it is a finding.
  std::vector<char> copy(body, body + body_size);
  GivenRequest request;
  bool read = mode == 0 ? read_native(copy.data(), copy.size(), request)
                        : read_v2(copy.data(), copy.size(), mode == 2 ? &header : nullptr,
                                  64 * 1024, request);
  if (!read) return 0;
  const char* begin = copy.data();
  const char* end = begin + copy.size();
  for (const GivenInput& input : request.inputs) {
    require(input.datatype != nullptr && input.ndim <= kMaxDims, "a taken input is typed");
    uint64_t nbytes;
    require(byte_count(input, nbytes), "a taken input's byte count fits in 64 bits");
    if (input.shm.named()) {
      require(
          input.bytes == nullptr && input.data_begin == nullptr && input.shm.byte_size == nbytes,
          "an input in a region has its bytes there, its byte size theirs");
    } else if (input.bytes != nullptr) {
      const char* at = reinterpret_cast<const char*>(input.bytes);
      require(at >= begin && nbytes <= static_cast<uint64_t>(end - at), "binary data in the body");
    } else {
      require(
          input.data_begin >= begin && input.data_end <= end && input.data_begin < input.data_end,
          "JSON data in the body");
    }
  }
  // The native API names its model; a v2 body is tried against every model (its path names it).
  for (const auto& [key, entry] : the_table().versions) {
    if (mode == 0 && key.first != request.model) continue;
    const MethodEntry* method = entry->method(request.method);
    std::array<const GivenInput*, kMaxInputs> ordered;
    uint64_t mask = 0;
    if (method == nullptr || !etrt_front::bind(request, *method, ordered)) continue;
    output_mask(request, *method, mask);
    for (size_t i = 0; i < method->inputs.size(); ++i) {
      uint64_t nbytes;
      byte_count(*ordered[i], nbytes);
      if (ordered[i]->shm.named()) continue;                 // no values to write
      if (nbytes > (uint64_t{1} << 24)) continue;            // the front's slot would refuse it
      std::unique_ptr<uint8_t[]> into(new uint8_t[nbytes]);  // never null, even for 0 bytes
      write_values(*ordered[i], into.get());
    }
  }
  return 0;
}
