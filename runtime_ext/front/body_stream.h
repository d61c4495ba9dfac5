// A v2 binary request the fronts' native path took before its body arrived whole (front_lane.h):
// the head and the JSON header were read and checked, the slot allocated, and the tensors'
// bytes still to come are written straight into their places in the slot as the connection
// gives them, instead of passing through uvicorn's parser and the Python codecs. The lane
// message is sent once the last byte is in.
#pragma once

#include "wire.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace etrt_front {

class BodyStream {
 public:
  // Where the payload's bytes [from, from + nbytes) go in the arena.
  struct Segment {
    uint64_t from = 0;
    uint64_t nbytes = 0;
    uint64_t to = 0;
  };

  BodyStream(std::vector<Segment> segments, uint64_t total, ethost::lane::InferRequest message)
      : segments_(std::move(segments)), total_(total), message_(message) {}

  // Writes the next payload bytes (at most what is still missing); returns how many it took.
  uint64_t write(uint8_t* arena, const uint8_t* data, uint64_t size) {
    uint64_t n = std::min(size, total_ - received_);
    for (const Segment& segment : segments_) {
      uint64_t begin = std::max(segment.from, received_);
      uint64_t end = std::min(segment.from + segment.nbytes, received_ + n);
      if (begin < end) {
        std::memcpy(arena + segment.to + (begin - segment.from), data + (begin - received_),
                    end - begin);
      }
    }
    received_ += n;
    return n;
  }

  bool complete() const { return received_ == total_; }
  const ethost::lane::InferRequest& message() const { return message_; }

 private:
  std::vector<Segment> segments_;
  uint64_t total_;
  uint64_t received_ = 0;
  ethost::lane::InferRequest message_;
};

}  // namespace etrt_front
