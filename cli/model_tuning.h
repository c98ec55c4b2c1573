// `tuneforge tune --model M.onnx`: a whole model tuned in rounds. The model's tasks
// (graph::ExtractTasks) share one trial budget through the gradient task scheduler
// (tuner/task_scheduler.h); each round is one TuningJob of one task, measured by the
// farm's agents like any other job. Every job counts the configs the db already holds
// for its task and target (JobSpec.count_earlier), so the budget is the model's total
// and a second run with the same budget measures nothing new.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/flags.h"
#include "compiler/frontend/onnx_reader.h"
#include "tuner/model_timing.h"
#include "tuneforge/v1/tuning.pb.h"

namespace tuneforge::cli {

// The --dim NAME=N[,...] and --shape INPUT=D0,D1,... flags (repeatable) of a command
// that loads a model.
absl::StatusOr<frontend::DimBindings> DimBindingsFromFlags(const Flags& flags);


struct ModelTuningOptions {
  std::string model_path;
  // The embedded default's db when its agent is this machine. The model is then built
  // and run here with the db's best schedules after the warm-up rounds, at half the
  // budget and at the end: each task's in-run factor (TaskScheduler::SetInRunFactor)
  // and the leftovers come from the run, and the end reports the measured latency
  // beside the estimate. Empty (agents elsewhere): the estimate alone.
  std::string local_db;
  int64_t trials = 0;
  int64_t round_trials = 32;
  int flat_rounds = 3;
  bool round_robin = false;  // the ablation's baseline instead of the gradient
  uint64_t seed = 1;
  bool json = false;  // JSON lines on stdout (events), no table
};

// Runs one round: a job of `trials` trials (counting the task's earlier configs) of
// `task`, followed to its end.
using RoundJobFn = std::function<absl::StatusOr<v1::JobStatus>(const std::string& task, int64_t trials,
                                                               uint64_t seed)>;

absl::Status TuneModel(const LoadedModel& model, const LeftoverTime& leftovers,
                       const ModelTuningOptions& options, const RoundJobFn& run_round);

}  // namespace tuneforge::cli
