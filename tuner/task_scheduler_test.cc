// Tests of the task scheduler: gains, warm-up, flat tasks, in-run factors.
#include "tuner/task_scheduler.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tuner/task_rounds.h"

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

// Two tasks alike alone, one of them three times as slow in the model as it runs
// (its kernels cold there): the objective counts it three times, and the rounds
// after the warm-up go to it.
TEST(TaskSchedulerTest, InRunFactorWeighsTheTaskAsTheModelRunsIt) {
  TaskSchedulerOptions o;
  o.total_trials = 160;
  o.round_trials = 16;
  TaskScheduler s({1.0, 1.0}, o);
  int trials = 0;
  for (int i = 0; i < 2; ++i) {
    const int t = s.Next(&trials);
    s.Update(t, trials, Curve(0, s.trials()[t] + trials));
  }
  EXPECT_DOUBLE_EQ(s.Objective(), 2 * Curve(0, 16));
  s.SetInRunFactor(1, 3.0);
  EXPECT_DOUBLE_EQ(s.in_run_factor(1), 3.0);
  EXPECT_DOUBLE_EQ(s.Objective(), 4 * Curve(0, 16));
  EXPECT_DOUBLE_EQ(s.ExpectedGain(1), 3 * s.ExpectedGain(0));
  for (int t; (t = s.Next(&trials)) >= 0;) s.Update(t, trials, Curve(0, s.trials()[t] + trials));
  EXPECT_GT(s.trials()[1], s.trials()[0]);
}

// The driver: every round's result reaches the scheduler, seeds advance by round, a
// failed round still spends its trials, and Cancelled ends the rounds with it.
TEST(TaskRoundsTest, RunsRoundsUntilTheBudgetIsSpent) {
  TaskSchedulerOptions o;
  o.total_trials = 96;
  o.round_trials = 16;
  TaskScheduler s({2.0, 1.0}, o);
  std::vector<uint64_t> seeds;
  int failed = 0;
  auto run = [&](const RoundInfo& r) -> absl::StatusOr<RoundResult> {
    seeds.push_back(r.seed);
    EXPECT_EQ(r.trials_before, s.trials()[r.task]);
    RoundResult result;
    result.spent = r.trials;
    result.new_trials = r.trials;
    if (r.round == 2) {  // a failed job: no best, the trials still count
      result.ok = false;
      ++failed;
      result.best_seconds = s.best()[r.task];
      return result;
    }
    result.best_seconds = Curve(r.task, r.trials_before + r.trials);
    return result;
  };
  int after = 0;
  absl::StatusOr<RoundsSummary> done =
      RunRounds(&s, 96, 7, run, [&](const RoundInfo&, const RoundResult&) { ++after; });
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->rounds, 6);
  EXPECT_EQ(after, 6);
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(done->new_trials, 96);
  EXPECT_EQ(done->stop_reason, "budget spent");
  EXPECT_EQ(s.spent(), 96);
  EXPECT_EQ(seeds, (std::vector<uint64_t>{7, 8, 9, 10, 11, 12}));

  TaskScheduler c({1.0, 1.0}, o);
  absl::StatusOr<RoundsSummary> cancelled = RunRounds(
      &c, 96, 1, [](const RoundInfo&) -> absl::StatusOr<RoundResult> { return absl::CancelledError("stop"); },
      nullptr);
  EXPECT_TRUE(absl::IsCancelled(cancelled.status())) << cancelled.status();
  EXPECT_EQ(c.spent(), 0);
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

// A budget smaller than a round per task is shared in the warm-up: 20 trials over
// three tasks with rounds of 16 are 6, 7 and 7, not 16, 4 and nothing.
TEST(TaskSchedulerTest, SmallBudgetIsSharedByTheWarmUp) {
  TaskSchedulerOptions o;
  o.total_trials = 20;
  o.round_trials = 16;
  TaskScheduler s({1, 1, 1}, o);
  std::vector<int> got;
  int trials;
  for (int t; (t = s.Next(&trials)) >= 0;) {
    EXPECT_EQ(t, static_cast<int>(got.size()));
    got.push_back(trials);
    s.Update(t, trials, 1.0);
  }
  EXPECT_EQ(got, (std::vector<int>{6, 7, 7}));
  // A budget below one trial per task still gives every task one round of 1 trial.
  o.total_trials = 2;
  TaskScheduler tiny({1, 1, 1}, o);
  for (int task = 0; task < 3; ++task) {
    int t = tiny.Next(&trials);
    EXPECT_EQ(t, task);
    EXPECT_EQ(trials, 1);
    tiny.Update(t, trials, 1.0);
  }
  EXPECT_EQ(tiny.Next(&trials), -1);
}

// Rounds that count the db's earlier configs may spend the budget in the warm-up (the
// first task had 64 configs from an earlier model, the budget is 40): the tasks not yet
// reached still get their warm-up round, of 1 trial (it measures nothing when the db has
// configs of them), so every task ends with a best; then the rounds stop.
TEST(TaskSchedulerTest, EveryTaskGetsItsWarmUpRoundWhenEarlierConfigsSpentTheBudget) {
  TaskSchedulerOptions o;
  o.total_trials = 40;
  o.round_trials = 16;
  TaskScheduler s({1, 1, 1}, o);
  int trials;
  ASSERT_EQ(s.Next(&trials), 0);
  s.Update(0, /*spent: the earlier configs=*/64, 1.0);
  for (int task = 1; task < 3; ++task) {
    ASSERT_EQ(s.Next(&trials), task);
    EXPECT_EQ(trials, 1);
    s.Update(task, 32, 2.0);
  }
  EXPECT_EQ(s.Next(&trials), -1);
  EXPECT_TRUE(std::isfinite(s.Objective()));
}

// A heavy task that keeps improving, a light one improving the same way and a heavy
// one that is flat from the start: the heavy improving task gets the most trials, and
// the objective ends below round-robin's with the same budget.
TEST(TaskSchedulerTest, GivesTheHeavyImprovingTaskTheMostTrials) {
  auto curve = [](int task, int trials) {
    if (task == 2) return 5.0;
    return 10.0 / std::sqrt(1.0 + trials);
  };
  const std::vector<double> weight = {10, 1, 5};
  TaskSchedulerOptions o;
  o.total_trials = 960;
  o.round_trials = 32;
  o.flat_rounds = 3;
  TaskScheduler s({SchedulerTask{weight[0], 0, ""}, SchedulerTask{weight[1], 0, ""},
                   SchedulerTask{weight[2], 0, ""}},
                  o);
  int trials = 0;
  for (int task; (task = s.Next(&trials)) >= 0;)
    s.Update(task, trials, curve(task, s.trials()[task] + trials));
  EXPECT_EQ(s.spent(), 960);
  EXPECT_GT(s.trials()[0], 2 * s.trials()[1]);
  EXPECT_GT(s.trials()[0], 2 * s.trials()[2]);
  EXPECT_TRUE(s.flat(2));
  EXPECT_LE(s.trials()[2], 4 * 32);  // warm-up plus the rounds that showed it flat
  double round_robin = 0;
  for (int t = 0; t < 3; ++t) round_robin += weight[t] * curve(t, 320);
  EXPECT_LT(s.Objective(), round_robin);
}

// Two tasks of one operator with the same work, one at a tenth of the other's
// throughput: the similar-task term expects the slow one to catch up, so it gets the
// next round ahead of a heavier task of another operator. Without groups it does not.
TEST(TaskSchedulerTest, SimilarTaskTermFavoursTheTaskFarBehindItsSiblings) {
  for (bool grouped : {true, false}) {
    TaskSchedulerOptions o;
    o.total_trials = 10000;
    o.round_trials = 16;
    const std::string g = grouped ? "conv2d" : "";
    TaskScheduler s({SchedulerTask{1, 1e9, g}, SchedulerTask{1, 1e9, g},
                     SchedulerTask{3, 1e9, grouped ? "dense" : ""}},
                    o);
    // Ten rounds' worth of trials each, flat: only the forward terms speak.
    s.Update(0, 160, 1e-3);
    s.Update(1, 160, 10e-3);
    s.Update(2, 160, 5e-3);
    int trials = 0;
    EXPECT_EQ(s.Next(&trials), grouped ? 1 : 2) << (grouped ? "grouped" : "ungrouped");
    EXPECT_GT(s.ExpectedGain(1), grouped ? s.ExpectedGain(2) : 0.0);
  }
}

// Every task flat: the scheduler stops before the budget is spent.
TEST(TaskSchedulerTest, StopsWhenEveryTaskIsFlat) {
  TaskSchedulerOptions o;
  o.total_trials = 1000;
  o.round_trials = 10;
  o.flat_rounds = 2;
  TaskScheduler s(std::vector<double>{1, 2}, o);
  int trials = 0;
  for (int task; (task = s.Next(&trials)) >= 0;) s.Update(task, trials, 1.0 + task);
  EXPECT_TRUE(s.all_flat());
  EXPECT_EQ(s.spent(), 60);  // three rounds each: the first, then two without gain
  EXPECT_EQ(s.rounds(0), 3);
}

// A resumed task reports the trials already in the db as its first round: they count
// against the budget, and a budget already spent gives no round at all.
TEST(TaskSchedulerTest, EarlierTrialsCountAgainstTheBudget) {
  TaskSchedulerOptions o;
  o.total_trials = 64;
  o.round_trials = 16;
  TaskScheduler s(std::vector<double>{1, 1}, o);
  int trials = 0;
  ASSERT_EQ(s.Next(&trials), 0);
  s.Update(0, 40, 1.0);  // 40 configs measured by an earlier run
  ASSERT_EQ(s.Next(&trials), 1);
  s.Update(1, 24, 2.0);
  EXPECT_EQ(s.spent(), 64);
  EXPECT_EQ(s.Next(&trials), -1);
}

// The ablation's baseline: round-robin splits the budget evenly whatever the gains.
TEST(TaskSchedulerTest, RoundRobinSplitsEvenly) {
  TaskSchedulerOptions o;
  o.total_trials = 96;
  o.round_trials = 16;
  o.round_robin = true;
  TaskScheduler s(std::vector<double>{10, 1, 5}, o);
  int trials = 0;
  for (int task; (task = s.Next(&trials)) >= 0;) s.Update(task, trials, 10.0 / (1 + s.trials()[task] + trials));
  EXPECT_EQ(s.trials(), (std::vector<int>{32, 32, 32}));
}

}  // namespace
}  // namespace tuneforge
