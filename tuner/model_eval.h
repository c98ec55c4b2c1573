// Offline evaluation of the cost model on recorded measurements: no kernel is built
// or measured, so feature, label, objective and XGBoost-parameter changes can be
// compared in seconds on the same data. Deterministic: the split depends only on the
// configs and `split_seed`, and training uses XGBoost with one thread.
//
// The model under test is the real ModelPolicy (Observe -> Retrain -> Score), so what
// is measured here is what the tuner uses.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "db/record.h"
#include "tuner/model_policy.h"
#include "tuner/search_policy.h"

namespace tuneforge {

struct HeldOutOptions {
  double train_fraction = 0.75;
  uint64_t split_seed = 42;
  int max_k = 10;  // recall@k uses k = clamp(test / 5, 1, max_k)
};

struct HeldOutResult {
  int train = 0;  // distinct configs of the task trained on
  int test = 0;   // distinct configs held out
  int transfer_rows = 0;  // rows of other tasks trained on
  double pairwise_accuracy = 0;
  double recall_at_k = 0;
  int k = 0;
  double train_seconds = 0;
};

// Splits the distinct configs of `context.task` in `records` (a config measured more
// than once keeps its best throughput; failed = 0) into train and test by a hash of
// (config, split_seed), trains a ModelPolicy with `options` on the train part plus
// `transfer` (records of other shapes, as ObserveOtherTasks gets them) and scores the
// test part against the measured throughput. `own_train = false` trains on `transfer`
// only: how well a model of other shapes ranks this one. InvalidArgument when there
// are fewer than 8 distinct configs or the model cannot be trained.
absl::StatusOr<HeldOutResult> EvaluateHeldOut(const PolicyContext& context,
                                              const ModelPolicyOptions& options,
                                              const std::vector<TuningRecord>& records,
                                              const std::vector<TuningRecord>& transfer,
                                              const HeldOutOptions& held_out = {},
                                              bool own_train = true);

// The search on a recorded pool, simulated: `pool` holds measured configs of
// ctx.task (a config recorded more than once counts once, with its best throughput;
// failed = 0), and a "measurement" looks a config up, so the run is exact and
// deterministic. The first batch is `batch` configs at random (from ctx.seed), or with
// a log model (ctx.model_store) its best-ranked, as a job warm from the log starts;
// then, the model retrained after every batch, each batch is the best-scored pool
// configs not measured yet that differ from every one already in the batch in at
// least options.min_knob_distance knobs (then, if short, the skipped ones), as
// ModelPolicy::Propose picks them from its walks; `others` (records of other shapes)
// go to ObserveOtherTasks first (model+transfer). It ends at the first config within
// 95% of the bar: the pool's best, or with SimulateOptions::bar_rank = k the k-th best.
struct SimulateOptions {
  int batch = 8;  // configs per batch
  // The bar is the throughput of the `bar_rank`-th best distinct config (1: the best).
  // On a shared machine the pool's best is the luckiest of thousands of single
  // measurements (session 30: the ops suite's best configs ran 1.39-1.66x their
  // re-timed speed, uniform probes 1.01-1.23x), so a search that reaches the config
  // everyone else would call best can still miss 95% of it; the k-th best is a bar
  // that k - 1 lucky samples cannot raise.
  int bar_rank = 1;
};
struct SimulatedSearch {
  int trials = 0;         // trials to reach 95% of the bar
  int configs = 0;        // distinct configs in the pool
  int within = 0;         // of them within 95% of the bar
  double random_expected = 0;  // random search's mean: (configs + 1) / (within + 1)
  double bar = 0;         // FLOP/s of the bar config
  double best = 0;        // FLOP/s of the pool's best
};
absl::StatusOr<SimulatedSearch> SimulateTrialsTo95(const PolicyContext& context,
                                                   const ModelPolicyOptions& options,
                                                   const std::vector<TuningRecord>& pool,
                                                   const std::vector<TuningRecord>& others,
                                                   const SimulateOptions& simulate = {});

// Where scoring time goes, on `candidates` fresh random configs of the task (none
// cached): Template::Instantiate (schedule + lowering) and feature extraction on one
// thread, XGBoost predict in one batch, and CostModel::Predict end to end (what the
// search pays, with the policy's scoring threads).
struct ScoringSpeed {
  int candidates = 0;
  // Per candidate, CPU time of the one thread doing it (wall time on a shared machine
  // mostly measures the other processes).
  double lower_us = 0;
  double extract_us = 0;
  double predict_us = 0;  // one batch
  double score_candidates_per_second = 0;  // CostModel::Predict on other fresh configs
  double score_cpu_us = 0;  // CPU time (all threads) per candidate in that Score call:
                            // on a loaded machine, wall time says more about the load
  int scoring_threads = 1;
};

// Trains a ModelPolicy with `options` on `records` (records of the task), then times
// scoring. InvalidArgument when the model cannot be trained from `records`.
absl::StatusOr<ScoringSpeed> MeasureScoringSpeed(const PolicyContext& context,
                                                 const ModelPolicyOptions& options,
                                                 const std::vector<TuningRecord>& records,
                                                 int candidates = 5000);

}  // namespace tuneforge
