// JobSpecFromFlags: the product's default job spec, and the flags that change it.
#include "cli/job_spec.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "compiler/support/status.h"
#include "server/job_manager.h"
#include "tuner/runner.h"
#include "tuner/search_policy.h"

namespace tuneforge::cli {

absl::StatusOr<v1::JobSpec> JobSpecFromFlags(const Flags& flags) {
  v1::JobSpec spec;
  const std::string policy = flags.Get("policy", "model");
  const std::vector<std::string>& names = SearchPolicyNames();
  if (std::find(names.begin(), names.end(), policy) == names.end())
    return absl::InvalidArgumentError("unknown --policy '" + policy + "' (available: model, random, grid, ga)");
  spec.set_policy(policy);
  if (flags.Has("model-early-batch")) {
    if (policy != "model") return absl::InvalidArgumentError("--model-early-batch is for --policy model");
    ASSIGN_OR_RETURN(int64_t n, flags.GetInt("model-early-batch", 2, 0, JobManager::kMaxBatch));
    spec.set_model_early_batch(static_cast<int>(n));
  }
  ASSIGN_OR_RETURN(int64_t early_stop, flags.GetInt("early-stop", 0, 0, JobManager::kMaxTrials));
  spec.set_early_stop(static_cast<int>(early_stop));
  ASSIGN_OR_RETURN(int64_t batch, flags.GetInt("batch", 0, 1, JobManager::kMaxBatch));
  spec.set_batch_size(static_cast<int>(batch));
  ASSIGN_OR_RETURN(int64_t timeout_ms, flags.GetInt("timeout-ms", 10000, 100, 3600000));
  ASSIGN_OR_RETURN(int64_t max_repeat,
                   flags.GetInt("max-repeat", MeasureOptions().max_repeat, 1, JobManager::kMaxRepeat));
  ASSIGN_OR_RETURN(int64_t max_spread_pct,
                   flags.GetInt("max-spread-pct", static_cast<int64_t>(MeasureOptions().max_spread * 100 + 0.5),
                                1, 100));
  spec.mutable_measure()->set_timeout_ms(static_cast<int>(timeout_ms));
  spec.mutable_measure()->set_max_repeat(static_cast<int>(max_repeat));
  spec.mutable_measure()->set_max_spread(static_cast<double>(max_spread_pct) / 100);
  spec.mutable_measure()->set_flush_cache(flags.Has("flush-cache"));
  ASSIGN_OR_RETURN(int64_t priority, flags.GetInt("priority", JobManager::kDefaultPriority,
                                                  JobManager::kMinPriority, JobManager::kMaxPriority));
  spec.set_priority(static_cast<int>(priority));
  spec.set_no_heuristics(flags.Has("no-heuristics"));
  const char* user = getenv("USER");
  spec.set_owner(user ? user : "");
  return spec;
}

}  // namespace tuneforge::cli
