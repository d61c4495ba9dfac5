// The two clocks the lane's requests are timed by: a steady one for their phases, and the wall
// clock for when each was answered (the statistics' last inference, service/dataplane/ledger.py).
#pragma once

#include <chrono>
#include <cstdint>

namespace ethost::lane {

inline uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Seconds since the epoch.
inline double wall_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace ethost::lane
