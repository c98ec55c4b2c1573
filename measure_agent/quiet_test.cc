// Tests of CPU pinning and the quiet check around a measurement.
#include "measure_agent/quiet.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tuneforge::agent {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CpuListTest, RangesAndSinglesSortedWithoutDuplicates) {
  EXPECT_THAT(*ParseCpuList("0-3,6"), ElementsAre(0, 1, 2, 3, 6));
  EXPECT_THAT(*ParseCpuList("6, 2,2-3"), ElementsAre(2, 3, 6));
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 6}), "0-3,6");
  EXPECT_EQ(FormatCpuList({1, 3, 4}), "1,3-4");
  EXPECT_EQ(FormatCpuList({}), "");
  for (const char* bad : {"", "a", "3-1", "-1", "0-", "1,,2", "99999"}) {
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(bad);
    EXPECT_FALSE(cpus.ok()) << bad;
    EXPECT_THAT(cpus.status().message(), HasSubstr("CPU list")) << bad;
  }
}

TEST(CpuTicksTest, BusyIsEverythingButIdleAndIowaitOfTheChosenCpus) {
  // user nice system idle iowait irq softirq steal guest guest_nice
  const char* stat =
      "cpu  100 0 50 1000 10 0 0 0 0 0\n"
      "cpu0 10 1 2 100 4 1 1 5 0 0\n"
      "cpu1 20 0 0 80 0 0 0 0 0 0\n"
      "cpu2 1 1 1 1 1 1 1 1 0 0\n"
      "intr 12345\n";
  CpuTicks t = ParseCpuTicks(stat, {0, 1});
  EXPECT_EQ(t.busy, 10 + 1 + 2 + 1 + 1 + 5 + 20);
  EXPECT_EQ(t.total, t.busy + 100 + 4 + 80);
  EXPECT_EQ(ParseCpuTicks(stat, {7}).total, 0);
  EXPECT_DOUBLE_EQ(BusyFraction({10, 100}, {40, 200}), 0.3);
  EXPECT_DOUBLE_EQ(BusyFraction({10, 100}, {10, 100}), 0);
}

TEST(CpuTicksTest, ThisMachineHasTicksForItsCpus) {
  const std::vector<int> cpus = AllowedCpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_GT(ReadCpuTicks(cpus).total, 0);
  // No check asked for: returns at once, quiet.
  QuietCheck check = WaitForQuiet(cpus, QuietOptions{});
  EXPECT_TRUE(check.quiet);
  EXPECT_EQ(check.waited_ms, 0);
}

TEST(PersistentLoadTest, StartsAfterTheStreakAndEndsAtTheFirstQuiet) {
  PersistentLoad load(3);
  EXPECT_FALSE(load.active());
  EXPECT_EQ(load.Record(false), 0);
  EXPECT_EQ(load.Record(true), 0);  // a quiet one starts the count again
  EXPECT_EQ(load.Record(false), 0);
  EXPECT_EQ(load.Record(false), 0);
  EXPECT_FALSE(load.active());
  EXPECT_EQ(load.Record(false), 1);  // the third in a row
  EXPECT_TRUE(load.active());
  EXPECT_EQ(load.Record(false), 0);
  EXPECT_TRUE(load.active());
  EXPECT_EQ(load.Record(true), -1);
  EXPECT_FALSE(load.active());
  EXPECT_EQ(load.Record(false), 0);  // counted from zero again
  EXPECT_FALSE(load.active());
}

TEST(PersistentLoadTest, ZeroNeverTakesTheLoadAsPersistent) {
  PersistentLoad load(0);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(load.Record(false), 0);
  EXPECT_FALSE(load.active());
}

}  // namespace
}  // namespace tuneforge::agent
