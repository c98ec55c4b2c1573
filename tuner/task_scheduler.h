// TaskScheduler: splits one trial budget across many TuningTasks (the tasks of a
// model, each with a weight = how often it runs per inference) by expected gain: the
// gradient-based task scheduler of the Ansor paper (Zheng et al., OSDI 2020, sec. 6).
// The objective is the estimated end-to-end latency
//
//     f = sum_i weight_i * factor_i * best_latency_i   (+ the leftovers, a constant here)
//
// factor_i (SetInRunFactor; 1 until set) is what task i's kernels cost in the model as
// it runs over what they cost measured alone, so f estimates the model as it runs.
//
// and each round (`round_trials` trials) goes to the task whose estimated decrease of
// f over one round is the largest:
//
//     gain_i = -weight_i * factor_i * (alpha * backward_i + (1 - alpha) * forward_i)
//     backward_i = change of best_i over the last `backward_window` rounds, per round
//                  (0 until the task has that many rounds)
//     forward_i  = min(best_i - best_i / rounds_i,        optimistic: latency keeps
//                                                          falling at its average rate
//                      beta * flops_i / best_throughput_of_similar_tasks)  - best_i
//
// Similar tasks are the tasks of the same group (the operator): a task far slower
// than its siblings (below 1/beta of their best GFLOP/s) is expected to catch up.
// Rounds are in units of `round_trials` trials: a round that spent another count (the
// earlier trials of a resumed task, a budget's last round) counts in proportion.
//
// Every task first gets one warm-up round (in order); when the budget left is less
// than a round for each task not yet started, it is shared equally among them (at
// least one trial each), so no task is left unmeasured; when the budget is gone before
// every task had its round (rounds that count the db's earlier configs can spend more
// than they were given), each task still without one gets a round of 1 trial, which
// measures nothing when the db has a config of it. A task without any successful
// measurement after a round gets one more chance. A task whose best improved by less
// than `flat_improvement` over its last `flat_rounds` rounds is flat (early stop) and
// gets no more rounds; Next() returns -1 when the budget is spent or every task is
// flat. The scheduler is pure bookkeeping: who runs the rounds is the caller's
// business (the server runs each round as a tuning loop; see docs/models.md).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/task/task_list.h"

namespace tuneforge {

// ScheduledTask and the tasks-file format live with TuningTask (compiler/task/task_list.h).

struct TaskSchedulerOptions {
  int total_trials = 200;
  int round_trials = 16;    // trials per allocation
  double alpha = 0.2;       // weight of the backward (observed) gradient
  double beta = 2.0;        // similar-task term: expect 1/beta of the siblings' best GFLOP/s
  int backward_window = 3;  // rounds
  int flat_rounds = 0;      // early stop after this many rounds without gain; 0 = never
  double flat_improvement = 0.01;  // "without gain": best improved by less than 1%
  // The baseline of the ablation: every round to the task with the fewest trials
  // (warm-up and flat tasks as above), gradients ignored.
  bool round_robin = false;
};

struct SchedulerTask {
  double weight = 1;
  double flops = 0;   // of one occurrence; 0 = unknown (no similar-task term)
  std::string group;  // tasks of one group are similar (e.g. the operator); "" = none
};

// Not thread-safe.
class TaskScheduler {
 public:
  TaskScheduler(std::vector<SchedulerTask> tasks, TaskSchedulerOptions options);
  // Tasks with weights only (no similar-task term).
  TaskScheduler(const std::vector<double>& weights, TaskSchedulerOptions options);

  // The task that gets the next round and how many trials it gets; -1 when the budget
  // is spent or every task is flat.
  int Next(int* trials);
  // The result of a round: trials actually spent and the task's best latency after it
  // (seconds; +inf while it has none).
  void Update(int task, int trials_spent, double best_seconds);

  // Expected decrease of the objective (seconds) from one more round of a task;
  // +inf before its warm-up round. Exposed for tests and progress tables.
  double ExpectedGain(int task) const;
  double Objective() const;  // weighted sum of best latencies (+inf if any task has none)
  // A task's in-run factor: what its kernels take in the model as it runs (cold
  // caches between kernels, layouts handed over, fused epilogues) over weight x its
  // best latency measured alone. Objective and gains weigh the task by weight x
  // factor from then on; 1 until set. `factor` must be positive and finite.
  void SetInRunFactor(int task, double factor);
  double in_run_factor(int task) const { return in_run_factor_[task]; }
  double weight(int task) const { return tasks_[task].weight; }
  bool flat(int task) const;
  bool all_flat() const;
  const std::vector<int>& trials() const { return trials_; }
  const std::vector<double>& best() const { return best_; }
  int rounds(int task) const { return static_cast<int>(history_[task].size()); }
  int spent() const { return spent_; }

 private:
  double Rounds(int task) const;  // trials in units of round_trials

  std::vector<SchedulerTask> tasks_;
  TaskSchedulerOptions options_;
  std::vector<int> trials_;
  std::vector<double> best_;
  std::vector<double> in_run_factor_;
  // Per task and round: the best latency and the task's trials after the round.
  std::vector<std::vector<double>> history_;
  std::vector<std::vector<int>> history_trials_;
  int spent_ = 0;
};

}  // namespace tuneforge
