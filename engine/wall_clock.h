// The wall clock, as driftd stamps processing time, deadlines and checkpoint claims with it.
#pragma once

#include <chrono>
#include <cstdint>

namespace driftd {

/// Microseconds since the Unix epoch, from the system clock (it may step; do not measure
/// durations with it).
inline int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// Milliseconds since the Unix epoch, from the system clock.
inline int64_t NowMs() { return NowUs() / 1000; }

}  // namespace driftd
