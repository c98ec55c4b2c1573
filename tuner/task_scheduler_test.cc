#include "tuner/task_scheduler.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tuneforge {
namespace {

TEST(TaskSchedulerTest, ParsesTasksFile) {
  auto tasks =
      ParseTasksFile("# a network\nmatmul M=64 N=64 K=64 weight=3\n\n  matmul M=8 N=8 K=8\n");
  ASSERT_TRUE(tasks.ok()) << tasks.status();
  ASSERT_EQ(tasks->size(), 2u);
  EXPECT_EQ((*tasks)[0].task_text, "matmul M=64 N=64 K=64");
  EXPECT_EQ((*tasks)[0].weight, 3);
  EXPECT_EQ((*tasks)[1].weight, 1);
  EXPECT_FALSE(ParseTasksFile("matmul M=1 N=1 K=1 weight=-2").ok());
  EXPECT_FALSE(ParseTasksFile("matmul M=1 N=1 K=1 weight=abc").ok());
  EXPECT_FALSE(ParseTasksFile("# nothing\n").ok());
}

// Task i's best latency after t trials: a curve that keeps improving for task 0
// (large, heavily weighted, far from converged) and is flat for task 1.
double Curve(int task, int trials) {
  if (task == 0) return 10.0 / std::sqrt(1.0 + trials);
  return 1.0;
}

TEST(TaskSchedulerTest, FavoursTheTaskWithLargerExpectedGain) {
  TaskSchedulerOptions o;
  o.total_trials = 320;
  o.round_trials = 16;
  TaskScheduler s({2.0, 1.0}, o);
  int trials = 0, rounds = 0;
  for (int task; (task = s.Next(&trials)) >= 0; ++rounds) {
    ASSERT_GT(trials, 0);
    s.Update(task, trials, Curve(task, s.trials()[task] + trials));
  }
  EXPECT_EQ(s.spent(), 320);
  EXPECT_GE(s.trials()[1], 16);  // warm-up round
  EXPECT_GT(s.trials()[0], 1.4 * s.trials()[1]);
  // Better than round-robin (160 trials each) on the job's objective.
  double round_robin = 2.0 * Curve(0, 160) + 1.0 * Curve(1, 160);
  EXPECT_LT(s.Objective(), round_robin);
}

TEST(TaskSchedulerTest, WarmUpVisitsEveryTaskFirst) {
  TaskScheduler s({1, 1, 1}, TaskSchedulerOptions{});
  int trials;
  for (int i = 0; i < 3; ++i) {
    int t = s.Next(&trials);
    EXPECT_EQ(t, i);
    s.Update(t, trials, 1.0);
  }
}

}  // namespace
}  // namespace tuneforge
