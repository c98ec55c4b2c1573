// TaskScheduler: splits one trial budget across many TuningTasks (e.g. the layers of a
// network, each with a weight = how often it runs) by expected gain, as in Ansor's
// gradient-based task scheduler. The job's objective is
//
//     f = sum_i weight_i * best_latency_i
//
// and each round the scheduler gives `round_trials` trials to the task whose
// estimated d f / d trials is most negative:
//
//     grad_i = weight_i * (alpha * backward_i + (1 - alpha) * forward_i)
//     backward_i = (best_i(now) - best_i(before the previous round)) / trials of that round
//     forward_i  = -best_i(now) / trials_i       (optimistic: latency keeps falling at
//                                                 its average rate so far)
//
// Every task first gets one warm-up round (in order). A task without any successful
// measurement after its rounds gets one more chance, then only rounds nobody else can
// use. The scheduler is pure bookkeeping — who runs the rounds is the caller's
// business (the CLI runs each round as a TuningJob; see docs/architecture.md).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/task/task_list.h"

namespace tuneforge {

// ScheduledTask and the tasks-file format live with TuningTask (compiler/task/task_list.h).

struct TaskSchedulerOptions {
  int total_trials = 200;
  int round_trials = 16;  // trials per allocation
  double alpha = 0.2;     // weight of the backward (observed) gradient
};

// Not thread-safe.
class TaskScheduler {
 public:
  TaskScheduler(std::vector<double> weights, TaskSchedulerOptions options);

  // The task that gets the next round and how many trials it gets; -1 when the budget
  // is spent.
  int Next(int* trials);
  // The result of a round: trials actually spent and the task's best latency after it
  // (seconds; +inf while it has none).
  void Update(int task, int trials_spent, double best_seconds);

  // Expected gain (-grad) of a task; exposed for tests and progress messages.
  double ExpectedGain(int task) const;
  double Objective() const;  // weighted sum of best latencies (+inf if any task has none)
  const std::vector<int>& trials() const { return trials_; }
  int spent() const { return spent_; }

 private:
  std::vector<double> weights_;
  TaskSchedulerOptions options_;
  std::vector<int> trials_;
  std::vector<int> rounds_;
  std::vector<double> best_, previous_best_;
  std::vector<int> last_round_trials_;
  int spent_ = 0;
};

}  // namespace tuneforge
