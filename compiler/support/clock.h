// Wall time on the steady clock, for the durations the service reports (job elapsed
// time, training and compile seconds, benchmark phases).
#pragma once

#include <chrono>

namespace tuneforge {

// Seconds from `start` to now on the steady clock.
inline double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace tuneforge
