// The fixed-layout messages of the engine's native lane (lane.h): a request a front checked
// against a route of the model table, and the engine's answer to it. Every other message between
// a front and the engine is a marshal tuple (service/ipc/frames.py); these two are plain structs
// so that the engine's link threads read and answer them without Python. Both ends share one
// machine, so fields are little-endian as laid out below, with no versioning: the supervisor
// starts fronts and engine from one installation.
//
//   request (front -> engine), 48 bytes, then per input 16 bytes + 8 per dimension, then per
//   shared memory reference 24 bytes + its region's name:
//     u8 tag = kInferTag, u8 inputs, u16 references, u32 route,
//     u64 request id, u64 generation, u64 room offset, u64 room size, u64 outputs asked (bit i)
//     per input: u64 offset in the front's arena, u32 ndim, u32 0, i64 dims[ndim]
//     per reference (a tensor in a client's shared memory region, service/shm/refs.py): u32
//       tensor (input or output index), u8 1 for an output (0: an input), u8 0, u16 name bytes,
//       u64 offset in the region, u64 byte size, the region's name (an input it names has no
//       bytes in the arena: its offset there is 0)
//   answer (engine -> front), 16 bytes, then per output asked 16 bytes + 8 per dimension:
//     u8 tag = kDoneTag, u8 outputs, u16 0, u32 0, u64 request id
//     per output: u32 index, u32 ndim, u64 offset in the front's arena (kInRegion: written into
//       the shared memory region its reference named), i64 dims[ndim]
//   cancel (front -> engine), 16 bytes: the client of a request went away before its answer:
//     u8 tag = kCancelTag, u8 why (0: the client went away, 1: the request's deadline passed),
//     u16 0, u32 0, u64 request id
//     (for any request, a lane request or not: the lane drops its own waiting ones, and hands
//     every other cancel to the engine's Python side, which cancels its own)
#pragma once

#include "contract_limits.h"
#include "status.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ethost::lane {

// A marshal payload starts with a tuple's type code ('(' or ')', maybe with marshal's reference
// flag 0x80), never with these.
constexpr uint8_t kInferTag = 0xF1;
constexpr uint8_t kDoneTag = 0xF2;
constexpr uint8_t kCancelTag = 0xF3;
using limits::kMaxDims;
using limits::kMaxInputs;
using limits::kMaxOutputs;
// The fixed parts' sizes, as laid out above (exported with the tags: service/ipc/lane_frames.py
// checks its struct layouts against them).
constexpr size_t kRequestHead = 48;
constexpr size_t kInputHead = 16;
constexpr size_t kAnswerHead = 16;
constexpr size_t kOutputHead = 16;
constexpr size_t kCancelSize = 16;
constexpr size_t kShmRefHead = 24;
// References one request may carry: one per input and per output at most.
constexpr size_t kMaxShmRefs = kMaxInputs + kMaxOutputs;
// An answer's offset for an output written into a client's region, not into the arena.
constexpr uint64_t kInRegion = ~uint64_t{0};

struct WireInput {
  uint64_t offset = 0;
  uint32_t ndim = 0;
  std::array<int64_t, kMaxDims> dims{};
};

// A tensor in a client's shared memory region (shm_regions.h).
struct WireShmRef {
  uint32_t tensor = 0;  // the input's or output's index
  bool output = false;
  uint64_t offset = 0;  // in the region
  uint64_t byte_size = 0;
  std::string region;
};

struct InferRequest {
  uint32_t route = 0;
  uint64_t request_id = 0;
  uint64_t generation = 0;
  uint64_t room_offset = 0;
  uint64_t room_size = 0;
  uint64_t outputs = 0;  // bit i: output i was asked for
  size_t input_count = 0;
  std::array<WireInput, kMaxInputs> inputs{};
  std::vector<WireShmRef> refs;  // empty for a request whose tensors are all in the arena
};

struct WireOutput {
  uint32_t index = 0;
  uint64_t offset = 0;
  uint32_t ndim = 0;
  std::array<int64_t, kMaxDims> dims{};
};

// The request in `data` (a whole message, tag included). Fails on a message that is not one,
// is cut short, is longer than its fields, or exceeds the limits above.
Outcome<InferRequest> read_request(const uint8_t* data, size_t size);

// The request id of the cancel in `data` and whether its deadline passed (why 1); false when it
// is not a whole cancel message.
bool read_cancel(const uint8_t* data, size_t size, uint64_t& request_id, bool& deadline);

// The request as a front writes it (tests, and the layout's one definition besides Python's).
std::string write_request(const InferRequest& request);

// Appends the answer to `out`, length prefix included (u32, as every message on the socket).
void append_answer(std::string& out, uint64_t request_id, const WireOutput* outputs, size_t count);

}  // namespace ethost::lane
