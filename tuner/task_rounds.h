// The task scheduler's driver: rounds of one task each, picked by the TaskScheduler,
// until the budget is spent or every task is flat. Who runs a round (a TuningJob on a
// farm, a simulation) is the caller's RoundFn; `tune --model` and `tune --tasks` use
// this one loop.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "tuner/task_scheduler.h"

namespace tuneforge {

// One round as the scheduler gave it.
struct RoundInfo {
  int round = 0;           // from 0
  int task = 0;            // index into the scheduler's tasks
  int trials_before = 0;   // the task's trials so far
  int trials = 0;          // this round's share of the budget
  double expected_gain = 0;  // seconds (TaskScheduler::ExpectedGain; +inf before warm-up)
  uint64_t seed = 0;       // the first seed plus the round
};

// What a round did. A round whose job failed (ok false) still counts its trials
// against the budget, so a broken task cannot stall the others.
struct RoundResult {
  bool ok = true;
  std::string error;              // why it failed
  int spent = 0;                  // trials it counts against the budget
  int new_trials = 0;             // trials measured in it
  double best_seconds = INFINITY;  // the task's best latency known after it
};

using RoundFn = std::function<absl::StatusOr<RoundResult>(const RoundInfo&)>;
using AfterRoundFn = std::function<void(const RoundInfo&, const RoundResult&)>;

struct RoundsSummary {
  int rounds = 0;
  int new_trials = 0;
  std::string stop_reason;  // "budget spent" or "every task flat"
};

// Runs rounds until `scheduler`'s budget (`total_trials`) is spent or every task is
// flat: `run` for each, the scheduler updated with its result, then `after` (may be
// null). An error of `run` (Cancelled: the user stopped it) ends the rounds with it.
absl::StatusOr<RoundsSummary> RunRounds(TaskScheduler* scheduler, int total_trials, uint64_t seed,
                                        const RoundFn& run, const AfterRoundFn& after);

}  // namespace tuneforge
