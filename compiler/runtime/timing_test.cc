// The measurement protocol, in-process, on ordinary functions standing in for kernels.
#include "compiler/runtime/timing.h"

#include "compiler/support/stats.h"
#include "compiler/support/unprivileged_child.h"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>

namespace tuneforge::runtime {
namespace {

int g_calls = 0;
int32_t CountingKernel(void** /*buffers*/) {
  ++g_calls;
  return 0;
}

// Busy-waits `micros` (buffers[0] points at the duration) so the protocol has
// something to time without sleeping.
int32_t SpinKernel(void** buffers) {
  ++g_calls;
  const int micros = *static_cast<int*>(buffers[0]);
  auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(micros);
  while (std::chrono::steady_clock::now() < until) {
  }
  return 0;
}

int32_t FailOnThirdCall(void** /*buffers*/) { return ++g_calls == 3 ? 5 : 0; }

TEST(TimeKernelTest, RunsWarmupCalibrationAndRepeats) {
  g_calls = 0;
  TimingOptions options;
  options.warmup = 2;
  options.number = 3;
  options.repeat = 4;
  options.min_repeat_ms = 0;  // the first calibration sample is long enough
  absl::StatusOr<Timing> timing = TimeKernel(CountingKernel, nullptr, options);
  ASSERT_TRUE(timing.ok()) << timing.status();
  EXPECT_EQ(timing->number, 3);
  ASSERT_EQ(timing->costs.size(), 4u);
  for (double c : timing->costs) EXPECT_GE(c, 0);
  EXPECT_EQ(g_calls, 2 + 3 + 4 * 3);
}

// Samples scripted by the test: each timed sample of `number` runs returns the next
// per-run cost times number (calibration samples are long enough at once).
class ScriptedRunner : public SampleRunner {
 public:
  explicit ScriptedRunner(std::vector<double> per_run) : per_run_(std::move(per_run)) {}
  absl::Status Warmup(int) override { return absl::OkStatus(); }
  absl::Status Flush() override { return absl::OkStatus(); }
  absl::StatusOr<double> Sample(int64_t number) override {
    if (!timed_) return 1.0;  // calibration: one long sample
    const double cost = per_run_[std::min(next_, per_run_.size() - 1)];
    ++next_;
    return cost * static_cast<double>(number);
  }
  absl::Status BeforeTimedSample() override {
    timed_ = true;
    return absl::OkStatus();
  }
  size_t timed_samples() const { return next_; }

 private:
  std::vector<double> per_run_;
  size_t next_ = 0;
  bool timed_ = false;
};

TEST(TimingProtocolTest, QuietSamplesStopAtRepeat) {
  ScriptedRunner runner({1.00, 1.01, 1.00, 5.0});
  TimingOptions options;
  options.repeat = 3;
  options.max_repeat = 10;
  options.max_spread = 0.05;
  absl::StatusOr<Timing> timing = RunTimingProtocol(runner, options);
  ASSERT_TRUE(timing.ok()) << timing.status();
  EXPECT_EQ(timing->costs.size(), 3u);
}

// An outlier among the first samples: more samples until they agree (the fastest and
// slowest fifth left out), or max_repeat.
TEST(TimingProtocolTest, NoisySamplesGetMoreUpToMaxRepeat) {
  TimingOptions options;
  options.repeat = 3;
  options.max_repeat = 8;
  options.max_spread = 0.05;
  {
    // One stray sample: forgiven at five samples (the slowest fifth is left out).
    ScriptedRunner runner({1.0, 2.0, 1.0, 1.01, 1.0, 1.0, 1.0, 1.0, 1.0});
    absl::StatusOr<Timing> timing = RunTimingProtocol(runner, options);
    ASSERT_TRUE(timing.ok()) << timing.status();
    EXPECT_EQ(timing->costs.size(), 5u);
  }
  {
    // Samples that keep disagreeing: max_repeat, no more.
    ScriptedRunner runner({1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0});
    absl::StatusOr<Timing> timing = RunTimingProtocol(runner, options);
    ASSERT_TRUE(timing.ok()) << timing.status();
    EXPECT_EQ(timing->costs.size(), 8u);
    EXPECT_EQ(runner.timed_samples(), 8u);
  }
  {
    // max_repeat <= repeat: exactly `repeat` samples whatever the spread.
    options.max_repeat = 2;
    ScriptedRunner runner({1.0, 3.0, 1.0, 1.0});
    absl::StatusOr<Timing> timing = RunTimingProtocol(runner, options);
    ASSERT_TRUE(timing.ok()) << timing.status();
    EXPECT_EQ(timing->costs.size(), 3u);
  }
}

TEST(TimingProtocolTest, RelativeSpreadLeavesOutTheOuterFifths) {
  EXPECT_EQ(RelativeSpread({}), 0);
  EXPECT_EQ(RelativeSpread({2.0}), 0);
  EXPECT_NEAR(RelativeSpread({1.0, 1.5, 2.0}), 1.0 / 1.5, 1e-12);
  EXPECT_DOUBLE_EQ(RelativeSpread({1.0, 1.0, 1.0, 1.0, 9.0}), 0.0);
  EXPECT_NEAR(RelativeSpread({0.5, 1.0, 1.0, 1.1, 9.0}), 0.1, 1e-12);
}

TEST(TimeKernelTest, NonPositiveOptionsAreClamped) {
  g_calls = 0;
  TimingOptions options;
  options.warmup = -1;
  options.number = 0;
  options.repeat = 0;
  absl::StatusOr<Timing> timing = TimeKernel(CountingKernel, nullptr, options);
  ASSERT_TRUE(timing.ok()) << timing.status();
  EXPECT_EQ(timing->number, 1);
  EXPECT_EQ(timing->costs.size(), 1u);
}

TEST(TimeKernelTest, NumberGrowsUntilASampleLastsMinRepeat) {
  int micros = 100;
  void* buffers[] = {&micros};
  TimingOptions options;
  options.number = 1;
  options.repeat = 2;
  options.min_repeat_ms = 200;
  absl::StatusOr<Timing> timing = TimeKernel(SpinKernel, buffers, options);
  ASSERT_TRUE(timing.ok()) << timing.status();
  // 200 ms / 100 us = 2000 runs: doubling from 1 stops at 2048 at the latest (each run
  // lasts at least 100 us), earlier when runs take longer on a loaded machine; it stops
  // at 1 only if one 100 us run was delayed by 200 ms. No assertion on wall time.
  EXPECT_GE(timing->number, 2);
  EXPECT_LE(timing->number, 2048);
  EXPECT_EQ(timing->number & (timing->number - 1), 0) << "doubles from 1: " << timing->number;
  for (double c : timing->costs) EXPECT_GE(c, 100e-6);
}

TEST(TimeKernelTest, BudgetCapsGrowthForSlowKernels) {
  int micros = 2000;
  void* buffers[] = {&micros};
  TimingOptions options;
  options.repeat = 3;
  options.min_repeat_ms = 10'000;  // would need thousands of runs per sample
  options.budget_seconds = 0.1;
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<Timing> timing = TimeKernel(SpinKernel, buffers, options);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(timing.ok()) << timing.status();
  EXPECT_LE(timing->number, 8);
  // Without the budget the three samples would take 30 s; the bound leaves a loaded
  // machine two orders of magnitude of headroom over the 0.1 s asked for.
  EXPECT_LT(seconds, 10.0);
}

TEST(TimeKernelTest, KernelFailureStopsTheMeasurement) {
  g_calls = 0;
  TimingOptions options;
  options.warmup = 1;
  options.repeat = 5;
  absl::StatusOr<Timing> timing = TimeKernel(FailOnThirdCall, nullptr, options);
  ASSERT_FALSE(timing.ok());
  EXPECT_NE(timing.status().message().find("returned 5"), std::string::npos);
  EXPECT_EQ(g_calls, 3);
}

TEST(TimeKernelTest, FlushCacheStillMeasures) {
  g_calls = 0;
  TimingOptions options;
  options.repeat = 2;
  options.flush_cache = true;
  options.min_repeat_ms = 50;  // ignored: cold runs are not batched
  absl::StatusOr<Timing> timing = TimeKernel(CountingKernel, nullptr, options);
  ASSERT_TRUE(timing.ok()) << timing.status();
  EXPECT_EQ(timing->costs.size(), 2u);
  EXPECT_EQ(timing->number, 1);
  EXPECT_EQ(g_calls, 2);  // one run per sample, no calibration runs
}

// A kernel whose target says 4 threads: one parallel loop of 64 iterations.
std::atomic<int64_t> g_sum{0};
void AddIndex(int64_t i, void*) { g_sum += i; }
int32_t ParallelKernel(void**) {
  tf_parallel_for(64, 4, AddIndex, nullptr);
  return 0;
}

// A pool that cannot create its threads fails the measurement instead of timing the
// kernel on fewer threads than its target says. Real refusal: a child process (whose
// pool has no workers yet; no other test here starts one) under RLIMIT_NPROC = 1,
// dropped to an unprivileged user first when run as root (root ignores the limit).
TEST(TimeKernelTest, ThreadsTheSystemRefusesFailTheMeasurement) {
  testing::ChildOutcome child = testing::RunUnprivileged([]() -> std::pair<int, std::string> {
    rlimit one{1, 1};
    if (setrlimit(RLIMIT_NPROC, &one) != 0) return {4, "setrlimit failed"};
    g_sum = 0;
    TimingOptions options;
    options.repeat = 2;
    absl::StatusOr<Timing> timing = TimeKernel(ParallelKernel, nullptr, options);
    if (g_sum.load() % 2016 != 0 || g_sum.load() == 0) return {3, "loop did not run every index"};
    if (timing.ok()) return {2, "measured on fewer threads than asked"};
    return {0, std::string(timing.status().message())};
  });
  ASSERT_EQ(child.exit_code, 0) << child.text;
  EXPECT_NE(child.text.find("asked for 4 threads and ran on"), std::string::npos) << child.text;

  // Here, with threads to spare, the same kernel is measured.
  absl::StatusOr<Timing> timing = TimeKernel(ParallelKernel, nullptr, TimingOptions());
  EXPECT_TRUE(timing.ok()) << timing.status();
}

}  // namespace
}  // namespace tuneforge::runtime
