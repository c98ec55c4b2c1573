// The measurement protocol (docs/architecture.md; the agent's sandbox child, deploy inspect and
// the benchmarks all time kernels with it):
//
//   warm-up runs (untimed)
//   calibrate: time one sample of `number` runs, doubling `number` until a sample
//              lasts min_repeat_ms (bounded by kMaxNumber and by the time budget)
//   `repeat` samples of `number` runs each; cost = sample seconds / number
//   while the samples' relative spread (max - min) / median exceeds max_spread:
//              one more sample, up to max_repeat samples (and within the budget)
//
// with an optional cache flush before every sample. Knows nothing about processes or
// protos: RunTimingProtocol drives a SampleRunner, which runs the samples in this
// process (TimeKernel, for deploy inspect, the benchmarks and the tests) or in another
// one (the agent's sandbox, which times an untrusted child from the outside).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/runtime/runtime.h"
#include "compiler/support/stats.h"

namespace tuneforge::runtime {

struct TimingOptions {
  int warmup = 0;            // untimed runs before calibration; < 0 is treated as 0
  int number = 1;            // first number of runs per sample; < 1 is treated as 1
  int repeat = 1;            // timed samples; < 1 is treated as 1
  int min_repeat_ms = 0;     // grow `number` until one sample lasts this long
  // Overwrite kFlushBytes before every sample, and time cold runs: `number` is not
  // grown (min_repeat_ms is ignored), so with number 1 every timed run starts with
  // its weights and inputs out of the caches, as a layer's do inside a model whose
  // weights exceed the last-level cache (TVM's enable_cpu_cache_flush with number=1).
  bool flush_cache = false;
  // Noisy samples: while (max - min) / median of the samples exceeds max_spread (> 0),
  // take another, up to max_repeat samples in all (<= repeat: exactly `repeat`). The
  // caller reports the median, which the extra samples make robust to a few outliers.
  int max_repeat = 0;
  double max_spread = 0;
  // Wall time the calibration and the timed samples may take together; 0 means no
  // bound. Growth of `number` stops before the predicted total would exceed it, so a
  // slow kernel with a large min_repeat_ms is not run absurdly often. It is a
  // prediction, not a deadline: the caller's timeout still applies.
  double budget_seconds = 0;
};

// The protocol's rule for one more sample: the samples so far disagree by more than
// `max_spread` (RelativeSpread) and there are fewer than `max_repeat` of them. Shared
// with the benchmarks that time in-process without the protocol's calibration.
inline bool WantsAnotherSample(const std::vector<double>& costs, int max_repeat,
                               double max_spread) {
  return max_spread > 0 && static_cast<int>(costs.size()) < max_repeat &&
         RelativeSpread(costs) > max_spread;
}

// Upper bound on `number`, whatever min_repeat_ms asks for.
inline constexpr int64_t kMaxNumber = int64_t{1} << 24;
// Bigger than the last-level cache of the machines we target.
inline constexpr int64_t kFlushBytes = int64_t{64} << 20;

struct Timing {
  std::vector<double> costs;  // seconds per run, one per sample (repeat..max_repeat)
  int64_t number = 0;         // runs per sample after calibration
};

// Evicts the caches by writing over a buffer larger than the last-level cache.
class CacheFlusher {
 public:
  // Allocates the buffer when `enabled`; ok() says whether that worked.
  explicit CacheFlusher(bool enabled);
  ~CacheFlusher();
  CacheFlusher(const CacheFlusher&) = delete;
  CacheFlusher& operator=(const CacheFlusher&) = delete;
  bool ok() const { return !enabled_ || buffer_ != nullptr; }
  void Flush();  // no-op when not enabled

 private:
  bool enabled_;
  char* buffer_ = nullptr;
  unsigned char value_ = 0;
};

// What the protocol needs from whoever runs the kernel.
class SampleRunner {
 public:
  virtual ~SampleRunner() = default;
  virtual absl::Status Warmup(int runs) = 0;  // untimed runs
  virtual absl::Status Flush() = 0;           // before every sample, when flush_cache
  // Wall seconds of `number` back-to-back runs.
  virtual absl::StatusOr<double> Sample(int64_t number) = 0;
  // Around each of the `repeat` timed samples (not the calibration ones): a runner
  // that does not trust the kernel poisons the output before and checks it after.
  virtual absl::Status BeforeTimedSample() { return absl::OkStatus(); }
  virtual absl::Status AfterTimedSample() { return absl::OkStatus(); }
};

// The protocol above over `runner`. Stops at the first error the runner returns.
absl::StatusOr<Timing> RunTimingProtocol(SampleRunner& runner, const TimingOptions& options);

// Runs `kernel(buffers)` in this process following the protocol. Fails (and stops at once) if the
// kernel returns non-zero. Not thread-safe with respect to `buffers`.
absl::StatusOr<Timing> TimeKernel(runtime::KernelEntry kernel, void** buffers,
                                  const TimingOptions& options);

}  // namespace tuneforge::runtime
