// XgbModel: the one wrapper around XGBoost's C API (xgboost/c_api.h is included only
// in xgb_model.cc). Trains gradient-boosted trees on FeatureVectors, predicts scores
// in batches, and saves/loads itself as bytes (XGBoost's UBJSON model format).
//
// Scores are only meaningful relative to each other (with the rank objective they are
// not throughputs): callers use them to order candidates.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "costmodel/features.h"

namespace tuneforge::costmodel {

struct XgbParams {
  // "rank:pairwise" (default: ranks candidates within a group) or "reg:squarederror"
  // (regresses the label). docs/features.md has the comparison that chose the default.
  std::string objective = "rank:pairwise";
  int rounds = 60;  // boosting rounds per Train
  int max_depth = 6;
  double eta = 0.2;  // learning rate
  double min_child_weight = 1;
  double subsample = 1.0;
  double colsample_bytree = 1.0;
  // rank:* objectives: pairs sampled per row and boosting round (XGBoost's
  // num_pairsample; its default is 1). 8 ranked held-out real records better than 1
  // at the same training time (docs/search.md, `bench search --eval-db`).
  int num_pairsample = 8;
  // XGBoost's OpenMP threads. 1 by default: on a machine whose cores are busy (the
  // builder, the agent, other jobs) OpenMP's spinning threads made training 6-9x slower
  // with 2 threads than with 1 (5,000 rows: 14 s vs 1.7 s).
  int nthread = 1;
  uint64_t seed = 1;
};

// Not thread-safe; owned by one CostModel user (a search policy, a benchmark).
class XgbModel {
 public:
  explicit XgbModel(XgbParams params = {});
  ~XgbModel();
  XgbModel(const XgbModel&) = delete;
  XgbModel& operator=(const XgbModel&) = delete;
  XgbModel(XgbModel&& other) noexcept;
  XgbModel& operator=(XgbModel&& other) noexcept;

  // Trains a fresh model (not incremental). `labels` are per row; `group_sizes` splits
  // the rows into consecutive groups for the rank objective (e.g. one per task) and
  // must sum to the row count; empty = one group. InvalidArgument on bad shapes,
  // Internal with XGBoost's message when XGBoost fails.
  // `base_margin` (per row, optional): the score the model starts from, e.g. another
  // model's prediction; the trees then learn only what corrects it. Predict does not
  // add it back: the caller adds the other model's prediction to this one's.
  absl::Status Train(const std::vector<FeatureVector>& rows, const std::vector<float>& labels,
                     const std::vector<unsigned>& group_sizes = {},
                     const std::vector<float>& base_margin = {});
  bool trained() const { return booster_ != nullptr; }
  // Length of the feature rows it was trained on; 0 before Train/Load.
  int num_features() const;
  // One score per row, higher = predicted faster. FailedPrecondition before Train/Load.
  absl::StatusOr<std::vector<float>> Predict(const std::vector<FeatureVector>& rows) const;

  absl::StatusOr<std::string> SaveToBytes() const;
  absl::Status LoadFromBytes(const std::string& bytes);

  const XgbParams& params() const { return params_; }

 private:
  absl::Status ApplyParams(void* booster) const;

  XgbParams params_;
  void* booster_ = nullptr;  // BoosterHandle; void* keeps c_api.h out of this header
};

// Ranking quality on held-out data (used by tests and bench search).
// Fraction of pairs with different labels that `scores` orders like `labels`.
double PairwiseAccuracy(const std::vector<float>& scores, const std::vector<float>& labels);
// |top-k by score ∩ top-k by label| / k.
double RecallAtK(const std::vector<float>& scores, const std::vector<float>& labels, int k);

}  // namespace tuneforge::costmodel
