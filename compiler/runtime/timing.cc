// The measurement protocol: repeats, min_repeat_ms, spread checks, cache flushing.
#include "compiler/runtime/timing.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "compiler/support/clock.h"
#include "compiler/support/status.h"

namespace tuneforge::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Runs the kernel in this process and times it with the steady clock.
class InProcessRunner : public SampleRunner {
 public:
  InProcessRunner(runtime::KernelEntry kernel, void** buffers, CacheFlusher* flusher)
      : kernel_(kernel), buffers_(buffers), flusher_(flusher) {}

  absl::Status Warmup(int runs) override {
    for (int i = 0; i < runs; ++i) {
      if (int32_t rc = kernel_(buffers_); rc != 0) return Failed(rc);
    }
    return absl::OkStatus();
  }
  absl::Status Flush() override {
    flusher_->Flush();
    return absl::OkStatus();
  }
  absl::StatusOr<double> Sample(int64_t number) override {
    Clock::time_point start = Clock::now();
    for (int64_t i = 0; i < number; ++i) {
      if (int32_t rc = kernel_(buffers_); rc != 0) return Failed(rc);
    }
    return SecondsSince(start);
  }

 private:
  static absl::Status Failed(int32_t rc) {
    return absl::InternalError(absl::StrCat("kernel entry returned ", rc));
  }
  runtime::KernelEntry kernel_;
  void** buffers_;
  CacheFlusher* flusher_;
};

}  // namespace

CacheFlusher::CacheFlusher(bool enabled) : enabled_(enabled) {
  if (enabled_) buffer_ = static_cast<char*>(std::malloc(kFlushBytes));
}

CacheFlusher::~CacheFlusher() { std::free(buffer_); }

void CacheFlusher::Flush() {
  if (buffer_ == nullptr) return;
  std::memset(buffer_, ++value_, kFlushBytes);
  // The asm barrier tells the compiler the memory is observed: the writes stay.
  asm volatile("" : : "r"(buffer_) : "memory");
}

absl::StatusOr<Timing> RunTimingProtocol(SampleRunner& runner, const TimingOptions& options) {
  const int warmup = std::max(0, options.warmup);
  const int repeat = std::max(1, options.repeat);
  const double min_sample_seconds = std::max(0, options.min_repeat_ms) / 1e3;
  Clock::time_point start = Clock::now();
  auto flush = [&]() -> absl::Status {
    return options.flush_cache ? runner.Flush() : absl::OkStatus();
  };

  RETURN_IF_ERROR(runner.Warmup(warmup));

  Timing timing;
  timing.number = std::clamp<int64_t>(options.number, 1, kMaxNumber);
  // Cold runs (flush_cache): no calibration, the samples keep `number`.
  while (!options.flush_cache) {
    RETURN_IF_ERROR(flush());
    absl::StatusOr<double> seconds = runner.Sample(timing.number);
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

  double last_seconds = 0;
  auto timed_sample = [&]() -> absl::Status {
    RETURN_IF_ERROR(runner.BeforeTimedSample());
    RETURN_IF_ERROR(flush());
    absl::StatusOr<double> seconds = runner.Sample(timing.number);
    if (!seconds.ok()) return seconds.status();
    RETURN_IF_ERROR(runner.AfterTimedSample());
    last_seconds = *seconds;
    timing.costs.push_back(*seconds / static_cast<double>(timing.number));
    return absl::OkStatus();
  };
  const int max_repeat = std::max(repeat, options.max_repeat);
  timing.costs.reserve(max_repeat);
  for (int r = 0; r < repeat; ++r) RETURN_IF_ERROR(timed_sample());
  while (WantsAnotherSample(timing.costs, max_repeat, options.max_spread)) {
    if (options.budget_seconds > 0 &&
        SecondsSince(start) + last_seconds > options.budget_seconds) {
      break;  // the next sample would pass the budget
    }
    RETURN_IF_ERROR(timed_sample());
  }
  return timing;
}

absl::StatusOr<Timing> TimeKernel(runtime::KernelEntry kernel, void** buffers,
                                  const TimingOptions& options) {
  (void)tf_take_thread_shortfall(nullptr);  // only this measurement's loops count
  CacheFlusher flusher(options.flush_cache);
  if (!flusher.ok()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate the ", kFlushBytes >> 20, " MiB cache-flush buffer"));
  }
  InProcessRunner runner(kernel, buffers, &flusher);
  ASSIGN_OR_RETURN(Timing timing, RunTimingProtocol(runner, options));
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
