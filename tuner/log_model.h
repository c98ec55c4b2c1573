// The log model: a cost model pre-trained on every record of one template and target
// in the shared tuning log (all shapes; one rank group per workload, labels relative
// to the workload's best), stored in the db under LogModelKey. A new task's
// CostModel ranks its first batch with it and then fine-tunes its own model on top
// of it (tuner/cost_model.h). TenSet's finding, applied to the team's db:
// a model of many shapes ranks a new shape well before it has any measurement.
//
// Built by `tuneforge db train-model`, refreshed by the server in the background when
// enough new records arrived (RefreshLogModels with only_stale) and by the nightly job.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/target/target.h"
#include "compiler/templates/template.h"
#include "db/database.h"
#include "tuner/cost_model.h"

namespace tuneforge {

struct LogModelOptions {
  // The trees' depth follows the template's space (LogModelDepth): 6, as a task's own
  // model (XgbParams'), where the features leave the knobs out (the GEMM spaces), and
  // `knob_features_max_depth` where they hold them (conv2d: the algorithm knob and
  // Winograd's). Measured live (docs/search.md "Log models: deeper trees"): 8 deep,
  // ResNet-18's conv2d log model put ResNet-18's 256@14^2 Winograd F(2,3) tops in
  // reach (warm trials to 95% of the cached bar 28 -> 14, level or better on 10 of
  // 11 layers), while the matmul suite's GEMM log model got worse on 4 of 5 shapes
  // (cached medians 15 -> 50 trials on 128x768x192); 6 stays for those.
  costmodel::XgbParams xgb;
  int knob_features_max_depth = 8;
  // The stored log models have the default features (what ModelPolicy extracts by
  // default); bench search --eval-db trains a variant's log model with its own.
  costmodel::FeatureOptions features;
  int max_records = 50000;  // newest records per (template, target) trained on
  int min_records = 16;     // fewer usable records: no model
  // Leaves one workload out (bench search: warm start without the case's own shape).
  std::string exclude_workload;
};

struct LogModelInfo {
  std::string key;  // LogModelKey
  std::string op;
  std::string template_name;
  int template_version = 0;
  std::string target_key;
  int64_t records = 0;      // records trained on
  int tasks = 0;            // workloads (rank groups) among them
  int64_t log_records = 0;  // records of the op and target in the db when trained
  double train_seconds = 0;
  int64_t trained_unix_us = 0;
  int max_depth = 0;  // the trees' depth (LogModelDepth); 0 in infos written before it
  // Records of the template and target that were left out, by reason ("task does not
  // parse", "config does not parse", "config does not build", "another knob set",
  // "alone in its workload"); empty when none (and in infos written before it).
  std::map<std::string, int64_t> dropped;
  int64_t dropped_total() const;

  std::string ToJson() const;
  static absl::StatusOr<LogModelInfo> FromJson(const std::string& text);
};

// The depth of the log model's trees for a template's space (see LogModelOptions).
int LogModelDepth(const ConfigSpace& space, const LogModelOptions& options);

// Trains the log model of `tmpl` on `target` from `records`; records of other
// templates, template versions, targets, untrusted uploads and unparsable configs are
// ignored. Features are computed on each record's own task. Returns the model bytes
// and fills `info` (records, tasks, train_seconds). InvalidArgument when fewer than
// `min_records` usable records remain.
absl::StatusOr<std::string> TrainLogModel(const Template& tmpl, const Target& target,
                                          const std::vector<TuningRecord>& records,
                                          const LogModelOptions& options, LogModelInfo* info);

struct LogModelRefresh {
  LogModelOptions model;
  std::string op;          // only this op ("" = every op with a template)
  std::string target_key;  // only this target ("" = every target)
  // Train only where the stored log model is missing or stale: at least
  // `min_new_records` records and `min_new_fraction` of its log_records arrived since.
  bool only_stale = false;
  int64_t min_new_records = 200;
  double min_new_fraction = 0.2;
};

struct LogModelRefreshResult {
  std::vector<LogModelInfo> trained;
  std::vector<std::string> skipped;  // "<op> on <target>: why"
};

// Trains and saves (Database::SaveModel: LogModelKey, and its info under key + ".info")
// the log model of every (op, target) in `db` that the filters select.
absl::StatusOr<LogModelRefreshResult> RefreshLogModels(Database* db,
                                                       const LogModelRefresh& options);

// The info saved with the log model under `key`; nullopt when there is none.
absl::StatusOr<std::optional<LogModelInfo>> StoredLogModelInfo(Database* db,
                                                               const std::string& key);

}  // namespace tuneforge
