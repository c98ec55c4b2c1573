#include "compiler/runtime/timing.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace tuneforge::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Evicts the kernel's buffers from the caches by writing over a buffer larger than
// the last-level cache. The asm barrier tells the compiler the memory is observed, so
// the writes cannot be elided.
class CacheFlusher {
 public:
  explicit CacheFlusher(bool enabled) {
    if (enabled) buffer_.reset(static_cast<char*>(std::malloc(kFlushBytes)));
  }
  // Returns false if the flush buffer could not be allocated.
  bool ok(bool enabled) const { return !enabled || buffer_ != nullptr; }
  void Flush() {
    if (!buffer_) return;
    std::memset(buffer_.get(), ++value_, kFlushBytes);
    asm volatile("" : : "r"(buffer_.get()) : "memory");
  }

 private:
  struct FreeDeleter {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, FreeDeleter> buffer_;
  unsigned char value_ = 0;
};

// Seconds for `number` back-to-back runs, or an error naming the failing run.
absl::StatusOr<double> Sample(runtime::KernelEntry kernel, void** buffers, int64_t number) {
  Clock::time_point start = Clock::now();
  for (int64_t i = 0; i < number; ++i) {
    int32_t rc = kernel(buffers);
    if (rc != 0) {
      return absl::InternalError(absl::StrCat("kernel entry returned ", rc));
    }
  }
  return SecondsSince(start);
}

}  // namespace

absl::StatusOr<Timing> TimeKernel(runtime::KernelEntry kernel, void** buffers,
                                  const TimingOptions& options) {
  const int warmup = std::max(0, options.warmup);
  const int repeat = std::max(1, options.repeat);
  const double min_sample_seconds = std::max(0, options.min_repeat_ms) / 1e3;
  Clock::time_point start = Clock::now();
  (void)tf_take_thread_shortfall(nullptr);  // only this measurement's loops count

  CacheFlusher flusher(options.flush_cache);
  if (!flusher.ok(options.flush_cache)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate the ", kFlushBytes >> 20, " MiB cache-flush buffer"));
  }

  for (int i = 0; i < warmup; ++i) {
    int32_t rc = kernel(buffers);
    if (rc != 0) return absl::InternalError(absl::StrCat("kernel entry returned ", rc));
  }

  Timing timing;
  timing.number = std::clamp<int64_t>(options.number, 1, kMaxNumber);
  for (;;) {
    flusher.Flush();
    absl::StatusOr<double> seconds = Sample(kernel, buffers, timing.number);
    if (!seconds.ok()) return seconds.status();
    if (*seconds >= min_sample_seconds || timing.number >= kMaxNumber) break;
    const int64_t next = std::min(timing.number * 2, kMaxNumber);
    if (options.budget_seconds > 0) {
      // Predicted time for the timed samples at `next` runs each, from this sample.
      const double per_run = *seconds / timing.number;
      const double predicted = per_run * next * repeat;
      if (SecondsSince(start) + *seconds * 2 + predicted > options.budget_seconds) break;
    }
    timing.number = next;
  }

  timing.costs.reserve(repeat);
  for (int r = 0; r < repeat; ++r) {
    flusher.Flush();
    absl::StatusOr<double> seconds = Sample(kernel, buffers, timing.number);
    if (!seconds.ok()) return seconds.status();
    timing.costs.push_back(*seconds / static_cast<double>(timing.number));
  }
  // Timed on fewer threads than the kernel (and its target) asked for: not a figure
  // for that target, so not a figure at all.
  int32_t got = 0;
  if (int32_t asked = tf_take_thread_shortfall(&got)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a parallel loop asked for ", asked, " threads and ran on ", got,
                     " (the system refused to create threads); not measured"));
  }
  return timing;
}

}  // namespace tuneforge::runtime
