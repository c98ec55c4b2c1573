#include "tuner/task_scheduler.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "compiler/support/status.h"

namespace tuneforge {

TaskScheduler::TaskScheduler(std::vector<double> weights, TaskSchedulerOptions options)
    : weights_(std::move(weights)),
      options_(options),
      trials_(weights_.size(), 0),
      rounds_(weights_.size(), 0),
      best_(weights_.size(), INFINITY),
      previous_best_(weights_.size(), INFINITY),
      last_round_trials_(weights_.size(), 0) {
  TF_CHECK(!weights_.empty());
  TF_CHECK(options_.round_trials > 0);
}

double TaskScheduler::ExpectedGain(int i) const {
  if (rounds_[i] == 0) return INFINITY;                                // warm-up first
  if (!std::isfinite(best_[i])) return rounds_[i] < 2 ? INFINITY : 0;  // one more chance
  double backward = 0;
  if (std::isfinite(previous_best_[i]) && last_round_trials_[i] > 0)
    backward = (best_[i] - previous_best_[i]) / last_round_trials_[i];
  else
    backward = -best_[i] / std::max(1, trials_[i]);  // first success: as good as forward
  double forward = -best_[i] / std::max(1, trials_[i]);
  double grad = weights_[i] * (options_.alpha * backward + (1 - options_.alpha) * forward);
  return -grad;
}

int TaskScheduler::Next(int* trials) {
  int left = options_.total_trials - spent_;
  if (left <= 0) return -1;
  int pick = 0;
  for (int i = 1; i < static_cast<int>(weights_.size()); ++i) {
    double gi = ExpectedGain(i), gp = ExpectedGain(pick);
    // Ties (e.g. warm-up) go to the task with fewer rounds, then the lower index.
    if (gi > gp || (gi == gp && rounds_[i] < rounds_[pick])) pick = i;
  }
  *trials = std::min(left, options_.round_trials);
  return pick;
}

void TaskScheduler::Update(int task, int trials_spent, double best_seconds) {
  TF_CHECK(task >= 0 && task < static_cast<int>(weights_.size()));
  // At least one trial per round, so a task whose space ran out cannot stall the budget.
  trials_spent = std::max(1, trials_spent);
  previous_best_[task] = best_[task];
  best_[task] = std::min(best_[task], best_seconds);
  trials_[task] += trials_spent;
  last_round_trials_[task] = trials_spent;
  ++rounds_[task];
  spent_ += trials_spent;
}

double TaskScheduler::Objective() const {
  double f = 0;
  for (size_t i = 0; i < weights_.size(); ++i) f += weights_[i] * best_[i];
  return f;
}

}  // namespace tuneforge
