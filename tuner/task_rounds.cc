// RunRounds: the task scheduler's round loop.
#include "tuner/task_rounds.h"

#include "compiler/support/status.h"

namespace tuneforge {

absl::StatusOr<RoundsSummary> RunRounds(TaskScheduler* scheduler, int total_trials, uint64_t seed,
                                        const RoundFn& run, const AfterRoundFn& after) {
  RoundsSummary out;
  int trials = 0;
  for (int task; (task = scheduler->Next(&trials)) >= 0; ++out.rounds) {
    RoundInfo info;
    info.round = out.rounds;
    info.task = task;
    info.trials_before = scheduler->trials()[task];
    info.trials = trials;
    info.expected_gain = scheduler->ExpectedGain(task);
    info.seed = seed + static_cast<uint64_t>(out.rounds);
    ASSIGN_OR_RETURN(const RoundResult result, run(info));
    out.new_trials += result.new_trials;
    scheduler->Update(task, result.spent, result.best_seconds);
    if (after) after(info, result);
  }
  out.stop_reason = scheduler->spent() >= total_trials ? "budget spent" : "every task flat";
  return out;
}

}  // namespace tuneforge
