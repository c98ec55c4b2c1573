// The JobSpec a tuning job runs with, from the command line's flags: `tuneforge tune`
// submits it, and `bench search --product` submits the same one, so the benchmark
// measures what users get.
#pragma once

#include "absl/status/statusor.h"
#include "cli/flags.h"
#include "tuneforge/v1/tuning.pb.h"

namespace tuneforge::cli {

// Everything of a job's spec but the task, trials, seed, device and target, from
// --policy, --model-early-batch, --early-stop, --batch, --timeout-ms, --max-repeat,
// --max-spread-pct, --flush-cache, --priority and --no-heuristics; a flag not given
// takes the product's default. InvalidArgument for a bad value.
absl::StatusOr<v1::JobSpec> JobSpecFromFlags(const Flags& flags);

}  // namespace tuneforge::cli
