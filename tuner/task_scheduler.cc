// TaskScheduler: one trial budget over a model's tasks by expected gain.
#include "tuner/task_scheduler.h"

#include <algorithm>
#include <cmath>

#include "compiler/support/status.h"

namespace tuneforge {
namespace {

std::vector<SchedulerTask> WeightsOnly(const std::vector<double>& weights) {
  std::vector<SchedulerTask> tasks;
  for (double w : weights) tasks.push_back(SchedulerTask{w, 0, ""});
  return tasks;
}

}  // namespace

TaskScheduler::TaskScheduler(std::vector<SchedulerTask> tasks, TaskSchedulerOptions options)
    : tasks_(std::move(tasks)),
      options_(options),
      trials_(tasks_.size(), 0),
      best_(tasks_.size(), INFINITY),
      in_run_factor_(tasks_.size(), 1.0),
      history_(tasks_.size()),
      history_trials_(tasks_.size()) {
  TF_CHECK(!tasks_.empty());
  TF_CHECK(options_.round_trials > 0);
  TF_CHECK(options_.backward_window > 0);
}

TaskScheduler::TaskScheduler(const std::vector<double>& weights, TaskSchedulerOptions options)
    : TaskScheduler(WeightsOnly(weights), options) {}

double TaskScheduler::Rounds(int i) const {
  return std::max(1.0, static_cast<double>(trials_[i]) / options_.round_trials);
}

bool TaskScheduler::flat(int i) const {
  const std::vector<double>& h = history_[i];
  const int n = options_.flat_rounds;
  if (n <= 0 || static_cast<int>(h.size()) <= n || !std::isfinite(h.back())) return false;
  const double before = h[h.size() - 1 - n];
  if (!std::isfinite(before)) return false;
  return before - h.back() < options_.flat_improvement * before;
}

bool TaskScheduler::all_flat() const {
  for (size_t i = 0; i < tasks_.size(); ++i)
    if (!flat(static_cast<int>(i))) return false;
  return true;
}

double TaskScheduler::ExpectedGain(int i) const {
  const std::vector<double>& h = history_[i];
  if (h.empty()) return INFINITY;                                // warm-up first
  if (!std::isfinite(best_[i])) return h.size() < 2 ? INFINITY : 0;  // one more chance
  if (flat(i)) return 0;
  const double best = best_[i];
  const double round = options_.round_trials;

  // Backward: the observed change per round over the window.
  double backward = 0;
  const int w = options_.backward_window;
  if (static_cast<int>(h.size()) > w && std::isfinite(h[h.size() - 1 - w])) {
    const int spent = history_trials_[i].back() - history_trials_[i][h.size() - 1 - w];
    backward = (h.back() - h[h.size() - 1 - w]) / std::max(1, spent) * round;
  }

  // Forward: optimistic continuation, or catching up with similar tasks.
  double next = best - best / Rounds(i);
  const SchedulerTask& t = tasks_[i];
  if (!t.group.empty() && t.flops > 0) {
    double sibling_throughput = 0;
    int siblings = 0;
    for (size_t j = 0; j < tasks_.size(); ++j) {
      if (tasks_[j].group != t.group || tasks_[j].flops <= 0 || !std::isfinite(best_[j])) continue;
      ++siblings;
      sibling_throughput = std::max(sibling_throughput, tasks_[j].flops / best_[j]);
    }
    if (siblings > 1 && sibling_throughput > 0)
      next = std::min(next, options_.beta * t.flops / sibling_throughput);
  }
  const double forward = next - best;
  const double grad = t.weight * in_run_factor_[i] * (options_.alpha * backward + (1 - options_.alpha) * forward);
  return -grad;
}

int TaskScheduler::Next(int* trials) {
  const int left = options_.total_trials - spent_;
  if (left <= 0) {
    // Every task gets its warm-up round, even one the budget did not reach: rounds that
    // count the db's earlier configs (a model tuned before) may spend the budget before
    // every task had one. A round of 1 trial measures nothing when the db has a config
    // of the task, and one config when it has none: either way the task has a best.
    for (int i = 0; i < static_cast<int>(tasks_.size()); ++i) {
      if (rounds(i) == 0) {
        *trials = 1;
        return i;
      }
    }
    return -1;
  }
  int pick = -1;
  double pick_gain = 0;
  for (int i = 0; i < static_cast<int>(tasks_.size()); ++i) {
    if (flat(i)) continue;
    const double gain = options_.round_robin ? -static_cast<double>(trials_[i]) : ExpectedGain(i);
    // Ties (e.g. warm-up) go to the task with fewer rounds, then the lower index.
    if (pick < 0 || gain > pick_gain || (gain == pick_gain && rounds(i) < rounds(pick))) {
      pick = i;
      pick_gain = gain;
    }
  }
  if (pick < 0) return -1;
  *trials = std::min(left, options_.round_trials);
  if (trials_[pick] == 0) {
    // Warm-up: a budget smaller than a round for every task not yet started is shared
    // among them, so none is left without a measurement.
    int unstarted = 0;
    for (int i = 0; i < static_cast<int>(tasks_.size()); ++i) unstarted += !flat(i) && trials_[i] == 0;
    *trials = std::min(*trials, std::max(1, left / std::max(1, unstarted)));
  }
  return pick;
}

void TaskScheduler::Update(int task, int trials_spent, double best_seconds) {
  TF_CHECK(task >= 0 && task < static_cast<int>(tasks_.size()));
  // At least one trial per round, so a task whose space ran out cannot stall the budget.
  trials_spent = std::max(1, trials_spent);
  best_[task] = std::min(best_[task], best_seconds);
  trials_[task] += trials_spent;
  spent_ += trials_spent;
  history_[task].push_back(best_[task]);
  history_trials_[task].push_back(trials_[task]);
}

double TaskScheduler::Objective() const {
  double f = 0;
  for (size_t i = 0; i < tasks_.size(); ++i) f += tasks_[i].weight * in_run_factor_[i] * best_[i];
  return f;
}

void TaskScheduler::SetInRunFactor(int task, double factor) {
  TF_CHECK(task >= 0 && task < static_cast<int>(tasks_.size()));
  TF_CHECK(factor > 0 && std::isfinite(factor));
  in_run_factor_[task] = factor;
}

}  // namespace tuneforge
