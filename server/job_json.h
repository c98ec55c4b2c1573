// The JSON of a job: `tune --json`, `jobs show --json` and the dashboard's job pages.
#pragma once

#include "nlohmann/json.hpp"
#include "tuneforge/v1/tuning.pb.h"

namespace tuneforge {

// A task's in-run factor (its kernel's time in the model over its time alone), 1
// until the server has measured one (servers before in-run factors send 0).
double InRunFactor(const v1::TaskProgress& t);

// {"config": {...}, "gflops", "seconds", "record_id"}.
nlohmann::json BestJson(const v1::BestResult& b);

// A job as `jobs show --json` prints it: job_id, state (QUEUED, RUNNING, SUCCEEDED,
// FAILED, CANCELLED), message, last_event, task (or "" for a job of several), trials
// (the budget), trials_done, elapsed_seconds, warnings, best (when there is one), and
// for a job of several tasks `tasks` (task, weight, trials, rounds, flat, error,
// in_run_factor, best) and estimated_seconds (the weighted sum of in-run factor x best,
// plus the leftovers when the model was timed; null until every task has one); for an
// uploaded model's job `model` {name, sha256, timing}: timing {timed, and either
// untuned_seconds, leftover_seconds, in_runs and, after a run with the best schedules,
// measured_seconds, measured_runs, measured_when, estimated_before_seconds; or reason}.
nlohmann::json JobStatusJson(const v1::JobStatus& status);

}  // namespace tuneforge
