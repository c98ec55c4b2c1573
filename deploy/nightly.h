// Nightly tuning jobs: the job spec (YAML) and the report. The orchestration (submit
// canary and tuning jobs to a server, wait) is in cli/nightly_command.cc;
// this file holds what needs no network: parsing and validating the spec, deciding
// budgets, comparing with last night and writing the report folder.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tuneforge {

// A YAML job spec; unknown keys are errors. See docs/operations.md for an example.
// A model of the spec's `models:`: tuned as one model job (the server's task scheduler
// spreads the budget over its tasks by expected gain).
struct NightlyModel {
  std::string name;  // as the spec names it
  std::string path;  // resolved against the spec's folder
  std::vector<std::string> tasks;  // its tuning tasks' canonical texts, in graph order
};

struct NightlySpec {
  std::string name = "nightly";
  std::string db;                       // the tuning log (relative to the spec's folder)
  std::vector<std::string> device_keys = {"local"};
  // Canonical task texts, each once: `tasks`, then `tasks_files`; a task one of the
  // models has is left to that model's job.
  std::vector<std::string> tasks;
  std::vector<NightlyModel> models;     // `models`, paths relative to the spec's folder
  int new_trials = 200;                 // untuned tasks, or tuned with an older template
  int converged_trials = 32;            // tasks that already have a current best
  double time_limit_minutes = 0;        // 0 = none; tasks not started in time are skipped
  double regression_threshold = 0.10;   // relative slow-down that counts as a regression
  bool canary = true;                   // re-measure last night's best first
};

absl::StatusOr<NightlySpec> LoadNightlySpec(const std::string& path);

// One (task, device key) of a night.
struct NightlyTaskResult {
  std::string task;
  std::string device_key;
  std::string model;             // the model whose job tuned it ("" = a job of its own)
  std::string job_id;            // tonight's tuning job ("" = none)
  std::string status;            // "tuned", "skipped (time limit)", "failed: ..."
  int trials = 0;
  bool was_stale = false;        // had no current-template record before tonight
  double best_gflops = 0;        // the db's best after tonight
  double previous_gflops = 0;    // last night's report (0 = no previous report)
  double canary_recorded_gflops = 0;  // the record being re-measured
  double canary_measured_gflops = 0;  // 0 = no canary
  // Best-so-far GFLOP/s after each record of tonight's job (baseline, trials, re-measurements).
  std::vector<double> curve;
  bool canary_slower = false;    // device/toolchain got slower
  bool regression = false;       // schedule got slower with a healthy canary
};

struct NightlyReport {
  std::string name;
  std::string date;              // YYYY-MM-DD
  double threshold = 0.10;
  std::vector<NightlyTaskResult> tasks;
  int log_models = -1;  // log models retrained at the end (-1: not by this job)
  bool HasRegression() const;
};

// Fills `regression` / `canary_slower` from the numbers and the threshold.
void Classify(NightlyReport* report);

// The previous report under `report_dir` (latest dated folder with a report.json
// other than `exclude`), as (task|device -> best GFLOP/s). Empty when none.
std::vector<std::pair<std::string, double>> PreviousBest(const std::string& report_dir,
                                                         const std::string& exclude);

// Writes report.md, report.html, report.json and curve-<n>.svg into `dir`.
absl::Status WriteNightlyReport(const NightlyReport& report, const std::string& dir);

// A tuning curve as a standalone SVG (`title` is escaped).
std::string CurveSvg(const std::string& title, const std::vector<double>& curve);

// Text made safe inside XML/HTML elements and quoted attributes: & < > " ' escaped.
// Every user-given name (task, device key, spec name, status) in a report goes
// through it; Markdown cells also get '|' escaped.
std::string XmlEscape(const std::string& text);

}  // namespace tuneforge
