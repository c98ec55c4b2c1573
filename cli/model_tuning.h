// `tuneforge tune --model M.onnx`: a whole model tuned as one model job. The model is
// checked here, uploaded with the job (TuningService.UploadModel) and tuned by the
// server: its task scheduler shares the budget over the model's tasks in rounds, and
// when the server's CPU is the job's target it times the model (leftovers, in-run
// factors; tuner/model_timing.h). The embedded default is such a server too. This
// file prints the job's progress as it is watched and its result at the end.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cli/client.h"
#include "cli/flags.h"
#include "compiler/frontend/onnx_reader.h"
#include "tuner/model_timing.h"
#include "tuneforge/v1/tuning.pb.h"

namespace tuneforge::cli {

// The --dim NAME=N[,...] and --shape INPUT=D0,D1,... flags (repeatable) of a command
// that loads a model.
absl::StatusOr<frontend::DimBindings> DimBindingsFromFlags(const Flags& flags);

// Uploads the --model file (with its --dim and --shape bindings) and makes `spec` a job
// of it: model_hash, model_dims, model_shapes, model_name. `model` is the same file as
// loaded here (it must have a task). Says so on stderr unless `quiet`.
absl::Status AttachModel(const Flags& flags, const LoadedModel& model, TuningClient* client, v1::JobSpec* spec,
                         bool quiet);

// Prints a model job's progress from the statuses a watch delivers, and its result.
// Text: the task table (redrawn in place on a terminal) and a line per round; JSON
// lines on stdout: {"event":"start"} at the first status, {"event":"round"} per status
// in which rounds ended, {"event":"in_run"} per run of the model with the best
// schedules, and {"event":"done"} at the end (docs/models.md).
class ModelJobPrinter {
 public:
  ModelJobPrinter(const LoadedModel& model, std::string model_path, bool json);
  void OnStatus(const v1::JobStatus& status);
  // The result of the job's last status (it succeeded).
  void Finish(const v1::JobStatus& last);

 private:
  std::vector<std::string> TableLines(const v1::JobStatus& s) const;
  void Start(const v1::JobStatus& s);

  const LoadedModel& model_;
  const std::string model_path_;
  const bool json_;
  const bool live_;                  // redraw the table in place (a terminal, not JSON)
  bool started_ = false;
  std::vector<int> rounds_seen_, trials_seen_, new_seen_;
  int rounds_ = 0;                   // rounds ended so far
  int in_runs_seen_ = 0;
  int drawn_ = 0;                    // lines of the table on the terminal
  double after_warmup_ = 0;          // the estimate after the warm-up's run (0: none)
};

}  // namespace tuneforge::cli
