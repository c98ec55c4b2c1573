// The measurement protocol, in-process, on ordinary functions standing in for kernels.
#include "compiler/runtime/timing.h"

#include <gtest/gtest.h>

#include <chrono>

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
  options.min_repeat_ms = 5;
  absl::StatusOr<Timing> timing = TimeKernel(SpinKernel, buffers, options);
  ASSERT_TRUE(timing.ok()) << timing.status();
  // 5 ms / 100 us = 50 runs: doubling from 1 stops at 64, or earlier when runs take
  // longer than asked on a loaded machine.
  EXPECT_GE(timing->number, 8);
  EXPECT_LE(timing->number, 64);
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
  EXPECT_LT(seconds, 0.5);
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
  absl::StatusOr<Timing> timing = TimeKernel(CountingKernel, nullptr, options);
  ASSERT_TRUE(timing.ok()) << timing.status();
  EXPECT_EQ(timing->costs.size(), 2u);
}

}  // namespace
}  // namespace tuneforge::runtime
