// A whole model timed on this machine while it is tuned: its leftovers (what runs
// besides the tasks' kernels) and its run with a db's best schedules, which give each
// task's in-run factor. Used by `tune --model` and by the server's model jobs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/frontend/onnx_reader.h"
#include "compiler/graph/executor.h"
#include "compiler/graph/graph.h"
#include "compiler/graph/tasks.h"
#include "compiler/target/target.h"
#include "db/database.h"
#include "tuner/task_scheduler.h"

namespace tuneforge {

// A model read, checked, imported and split into tasks.
struct LoadedModel {
  frontend::OnnxModel model;
  graph::Graph graph;
  graph::TaskTable table;
};
// With `dims`, the model's symbolic input dimensions bound first (--dim, --shape).
absl::StatusOr<LoadedModel> LoadOnnxModel(const std::string& path, const frontend::DimBindings& dims = {});

// Opens `path` read-only (it must exist).
absl::StatusOr<std::unique_ptr<Database>> OpenDbReadOnly(const std::string& path);

// The graph executor's schedules from a tuning-log database: each task's best record
// on `*target` (the noise-aware ranking of `db best`), or the template's default
// schedule when there is none. A record of another template (version) whose config
// no longer fits also falls back, with a warning on stderr: the model still runs.
// `db` and `target` must outlive the function.
graph::ScheduleFn BestRecordSchedule(Database* db, const Target* target);

// What the model runs besides its tasks, timed once by the executor with default
// schedules: the constant of the objective.
struct LeftoverTime {
  double leftover_seconds = 0;  // steps that are not a task's kernel
  double untuned_seconds = 0;   // the whole model, default schedules
  int threads = 0;
};
absl::StatusOr<LeftoverTime> MeasureLeftovers(const graph::Graph& graph, int threads);

// The model as it runs here with a db's best schedules (the default schedule where a
// task has no record): what `bench model --db` runs.
// The split (tasks, leftovers) comes from profiled runs, scaled so that it adds up to
// the median of whole runs (timing each step costs time of its own).
struct InRunTime {
  std::vector<double> task_seconds;  // per task of `tasks`: its steps per inference (0: none ran)
  double leftover_seconds = 0;       // the steps that are not a task's kernel
  double model_seconds = 0;          // median of whole runs
  double profiled_seconds = 0;       // the profiled runs' sum of the split before scaling
  int runs = 0;
  double compile_seconds = 0;
  int unmatched_task_steps = 0;      // a task's kernel whose task is not in `tasks` (counted as leftover)
};
// `tasks`: canonical task texts, in the order the result's task_seconds follow.
// `target`: whose records in `db` are the schedules; it must run here
// (RunsHereAsOnDevice).
absl::StatusOr<InRunTime> MeasureInRun(const graph::Graph& graph, const std::vector<std::string>& tasks,
                                       Database* db, const Target& target);

// Sets each task's in-run factor from a run: its time in the run over weight x its
// best latency alone. Tasks without a best or without time in the run keep theirs.
void CalibrateInRun(const InRunTime& run, TaskScheduler* scheduler);

// Whether code for `target` runs here as it would on its device: the same triple, CPU
// and features as this machine, and no more threads than it has.
bool RunsHereAsOnDevice(const Target& target);

}  // namespace tuneforge
