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
#include "compiler/graph/graph.h"
#include "compiler/graph/tasks.h"
#include "compiler/frontend/onnx_reader.h"
#include "tuneforge/v1/tuning.pb.h"

namespace tuneforge::cli {

// A model read, checked, imported and split into tasks.
struct LoadedModel {
  frontend::OnnxModel model;
  graph::Graph graph;
  graph::TaskTable table;
};
// With `dims`, the model's symbolic input dimensions bound first (--dim, --shape).
absl::StatusOr<LoadedModel> LoadModel(const std::string& path, const frontend::DimBindings& dims = {});
// The --dim NAME=N[,...] and --shape INPUT=D0,D1,... flags (repeatable) of a command
// that loads a model.
absl::StatusOr<frontend::DimBindings> DimBindingsFromFlags(const Flags& flags);


// What the model runs besides its tasks, timed once on this machine by the executor
// with default schedules: the constant of the objective.
struct LeftoverTime {
  double leftover_seconds = 0;  // steps that are not a task's kernel
  double untuned_seconds = 0;   // the whole model, default schedules
  int steps = 0, leftover_steps = 0;
  int threads = 0;
};
absl::StatusOr<LeftoverTime> MeasureLeftovers(const graph::Graph& graph, int threads);

// The model as it runs here with a db's best schedules (the default schedule where a
// task has no record): what `bench model --db` runs.
struct InRunTime {
  std::vector<double> task_seconds;  // per task of the table: its steps per inference (0: none ran)
  double leftover_seconds = 0;       // the steps that are not a task's kernel
  double model_seconds = 0;          // median of whole runs
  int runs = 0;
  double compile_seconds = 0;
  int unmatched_task_steps = 0;      // a task's kernel whose task is not in the table (counted as leftover)
};
absl::StatusOr<InRunTime> MeasureInRun(const LoadedModel& model, const std::string& db_path, int threads);

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
