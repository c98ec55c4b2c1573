// CostModel: predicts how fast a config of one task runs, for the model search policy.
//
// It owns everything about the prediction and nothing about the search:
//   features      of a config's lowered IR (costmodel::FeatureExtractor), cached
//   own model     XGBoost trees (rank:pairwise) trained on the task's measured configs
//                 and, for transfer learning, on other shapes of the same operator and
//                 target (one rank group per task); label = throughput / the group's best
//   log model     trees pre-trained on the shared tuning log (LogModelKey, `tuneforge
//                 db train-model`): they rank from the first batch, and the own model is
//                 then trained on top of their scores (XGBoost base_margin) and learns
//                 only what corrects them; a prediction is log + own
//   hardware prior a hand-written score of the loop-IR features (the target's widest
//                 vectors, a parallel loop that keeps every thread busy, a register tile
//                 that fills 3/8 to 4/5 of the vector registers without spilling). Cold
//                 (no log model) the own model is trained on top of `hardware_prior_weight`
//                 x the prior and a prediction is trees + weight x prior
//   persistence   with a ModelStore: the log model, else the last job's own model, is
//                 loaded at start; the own model is saved after every update unless it
//                 only corrects a log model (ModelKey / OwnModelKey)
// Update() retrains when something new was added; Predict() scores configs.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/features.h"
#include "costmodel/xgb_model.h"
#include "tuner/search_policy.h"

namespace tuneforge {

// FLOP/s of a record; 0 for a failed one.
double RecordThroughput(const TuningRecord& record);
// Appends one rank group's labels: each throughput relative to the group's best, in
// [0, 1] (graded relevance, log-scaled and regression labels were tried and ranked
// worse: docs/history/search-2026-11.md).
void AppendRankLabels(const std::vector<double>& throughput, std::vector<float>* labels);

struct CostModelOptions {
  int min_records = 4;  // rows needed before the own model is trained
  // Newest records of other tasks used for training.
  int max_transfer_records = 3000;
  // With a log model, the own model is still trained on the other tasks' records (up
  // to max_transfer_records, one rank group per task) next to its own, on top of the
  // log model's scores, instead of on its own records alone: a correction learned from
  // 8-64 own configs alone overfits them. Warm from the log, 5 seeds, trials to 95% of
  // the best known: matmul 256^3 26 -> 4, matmul 128x768x192 39 -> 6, the ops suite's
  // conv2d and dense within a trial; ResNet-18's conv2d tasks 28 -> 17 on 64->64 3x3,
  // 1-2 -> 3-6 on four others (docs/search.md "Warm start from the shared log").
  bool transfer_with_log_model = true;
  // Cold (no log model), the own model is trained on top of this weight x the hardware
  // prior, and a prediction is the trees' + weight x prior; 0: off. Cold, 16 cases
  // (ResNet-18's 12 tasks and the ops suite), 15 seeds, trials to 95% of the best known
  // (cached numbers), with ModelPolicyOptions::prior_pool: 0.48x the trials of neither
  // (geometric mean) (docs/history/search-2026-11.md "The hardware prior").
  double hardware_prior_weight = 2;
  // Threads that lower and extract features of uncached configs in Predict (the search
  // runs between batches, when the machine is otherwise idle).
  int scoring_threads = 2;
  costmodel::XgbParams xgb;
  costmodel::FeatureOptions features;
};

// Not thread-safe; owned by one ModelPolicy (or a benchmark).
class CostModel {
 public:
  // `context.tmpl` and `context.model_store` must outlive the model.
  CostModel(const PolicyContext& context, CostModelOptions options);

  // A measured config of the task (every knob set): its throughput (FLOP/s; 0 for a
  // failed one) becomes a row, the best of repeated measurements. True when the config
  // is new.
  bool AddOwn(const Config& config, double throughput);
  // A record of another task. Taken (true) when it is of the same template, version,
  // target and operator, lowers, and the cap (max_transfer_records) is not reached.
  bool AddOtherTask(const TuningRecord& record);
  // Whether AddOtherTask would take records: not with a log model unless
  // transfer_with_log_model (the log model was trained on them all).
  bool WantsOtherTasks() const;
  // Retrains now if anything was added since the last update. Ok and no model when
  // there are too few rows.
  absl::Status Update();
  // Scores of configs of the task (higher = predicted faster); a config that does not
  // lower scores -inf. FailedPrecondition when there is no model yet (can_predict).
  absl::StatusOr<std::vector<float>> Predict(const std::vector<Config>& configs);
  // The hardware prior of configs of the task; -inf for a config that does not lower.
  std::vector<float> HardwarePriorOf(const std::vector<Config>& configs);

  // Whether Predict can rank: an own model or a log model.
  bool can_predict() const { return own_model_.trained() || log_model_.trained(); }
  bool has_log_model() const { return log_model_.trained(); }
  const costmodel::XgbModel& own_model() const { return own_model_; }
  // Where the own model is kept between jobs: ModelKey, followed by "/hw<weight>" when
  // it is trained on top of the hardware prior.
  std::string OwnModelKey() const;
  // The task's measured configs (Config::ToJson of every knob) and their best throughput.
  const std::map<std::string, double>& own_throughput() const { return own_; }
  int rows() const { return static_cast<int>(own_.size()) + other_rows_; }
  int other_task_rows() const { return other_rows_; }
  double last_train_seconds() const { return last_train_seconds_; }
  // What did not work as designed (a stored model unreadable or not saved, hardware
  // prior terms whose features are missing), each returned once.
  std::vector<std::string> TakeWarnings() { return std::exchange(warnings_, {}); }

 private:
  // Loads the log model, else the last job's own model, from the store.
  void LoadStored();
  // Warns (once) when hardware prior terms count 0 for lack of their features.
  void WarnIfPriorIncomplete();
  // Features of `config` on `task` (cached for the own task); false when it does not lower.
  bool FeaturesOf(const TuningTask& task, const Config& config, costmodel::FeatureVector* out);
  // Features of the own task's configs, the uncached ones computed on
  // `scoring_threads` threads; an empty vector for a config that does not lower.
  std::vector<costmodel::FeatureVector> OwnFeatures(const std::vector<Config>& configs);
  // The hardware prior of a feature vector (higher = expected faster); 0 when empty.
  float HardwarePrior(const costmodel::FeatureVector& f) const;

  PolicyContext context_;
  ConfigSpace space_;
  CostModelOptions options_;
  costmodel::FeatureExtractor extractor_;
  // Indices of the features HardwarePrior reads (-1: not in this layout).
  struct PriorIndex {
    int lanes = -1, has_parallel = -1, parallel_extent = -1, parallel_balance = -1,
        accumulators = -1, register_tile = -1;
  } prior_index_;
  std::string prior_missing_;  // names of the prior's features not in this layout
  bool prior_warned_ = false;
  costmodel::XgbModel own_model_;
  costmodel::XgbModel log_model_;  // untrained when there is none
  bool fine_tuned_ = false;        // own_model_ was trained on top of log_model_
  bool on_hardware_prior_ = false;  // own_model_ was trained on top of the hardware prior
  // Own task: best throughput per config (Config::ToJson of every knob).
  std::map<std::string, double> own_;
  // Other tasks: rows and throughputs per workload key.
  struct Group {
    std::vector<costmodel::FeatureVector> rows;
    std::vector<double> throughput;
  };
  std::map<std::string, Group> other_;
  int other_rows_ = 0;
  std::unordered_map<std::string, costmodel::FeatureVector> feature_cache_;  // own task
  bool dirty_ = false;
  double last_train_seconds_ = 0;
  std::vector<std::string> warnings_;
};

}  // namespace tuneforge
