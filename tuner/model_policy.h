// ModelPolicy ("model"): model-guided search, as in AutoTVM/Ansor.
//
//   Observe(records)      -> training rows (features of the config's lowered IR,
//                            label = throughput normalised by the task's best; failed
//                            candidates count as zero throughput); the model is retrained
//                            before the next Propose, i.e. after every batch (cold, the
//                            first batches are small: `early_batch`)
//   Propose(n)            -> parallel simulated annealing: `chains` walks over the
//                            ConfigSpace (one knob changed per step), scored by the
//                            XGBoost model in batches; the best-scored unvisited configs
//                            seen by any walk fill the batch — no two of them closer
//                            than `min_knob_distance` knobs while candidates last —
//                            except that each slot is a uniform random config with
//                            probability `epsilon`, and that a value of a structural
//                            knob (an algorithm) measured fewer than
//                            `structural_quota` times gets slots of its own
//   ObserveOtherTasks     -> transfer learning: records of other shapes of the same
//                            operator on the same target train the model too (one rank
//                            group per task), so a new task starts with a useful model
//
// Warm start: when the ModelStore holds a model pre-trained on every record of the
// template and target in the shared log (LogModelKey, `tuneforge db train-model`),
// it ranks candidates from the first batch; once the task has `min_records` records
// of its own, the own model is trained starting from the log model's scores
// (XGBoost base_margin: it learns only what corrects them) and a score is log + own.
// The records of other tasks are then not trained on again (the log model has them).
// Before the model has anything to learn from (no log model, fewer than
// `min_records` rows) it proposes random configs, picked by the hardware prior
// (ModelPolicyOptions::prior_pool), and cold the model is trained on top of that prior
// (prior_margin). A config is never proposed twice, nor one observed.
// With a ModelStore, the model is loaded at start (when nothing else is known) and
// saved after every retrain, keyed by template and target (ModelKey).
#pragma once

#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

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

struct ModelPolicyOptions {
  int chains = 64;                  // parallel simulated-annealing walks
  int steps = 24;                   // steps per walk and Propose
  double epsilon = 0.05;            // share of random picks (exploration)
  // Draws of a second knob that may make a rejected one-knob mutation valid
  // (MutateConfig). 0: a rejected mutation draws another knob instead. Cold, 9 seeds,
  // trials to 95% of the best known: matmul 256^3 53 -> 41, dense 128x768x768 47 -> 26,
  // conv2d unchanged (docs/search.md "Repaired mutations").
  int repair_tries = 4;
  // The hardware prior (HardwarePrior: the target's widest vectors, a parallel loop
  // that keeps every thread busy, a register tile that fills 3/8 to 4/5 of the vector
  // registers without spilling), for cold runs (no log model). Before the model can
  // rank, the random configs are the prior's best of `prior_pool` x n random draws, no
  // two closer than `min_knob_distance` knobs (nor to a measured one); 0: plain random.
  // The own model is trained on top of `prior_margin` x the prior (XGBoost
  // base_margin, as on a log model's scores: the trees learn what corrects it), and a
  // score is the trees' + prior_margin x prior; 0: off. Cold, 16 cases (ResNet-18's 12
  // tasks and the ops suite), 15 seeds, trials to 95% of the best known (cached
  // numbers): 0.48x the trials of neither (geometric mean), the first layer 10 -> 5,
  // 128->256 1x1 s2 10 -> 4, 512@7^2 > 64 -> 9 (docs/search.md "The hardware prior").
  int prior_pool = 8;
  double prior_margin = 2;
  // Every value of a structural knob (Knob::structural, e.g. conv2d's algorithm) is
  // measured at least this many times before the model's ranking alone decides: while
  // a value has fewer own measurements, each batch reserves up to two slots for the
  // best-scored candidates with that value (at most half the batch). A model trained
  // on direct convolutions alone would otherwise score Winograd by features it has
  // never seen vary. Measurements of other shapes (transfer learning) count; with a log
  // model there are no quota picks (it learned every algorithm from the shared log).
  // 0: off.
  int structural_quota = 4;
  // Slots of each batch (no log model) for probes of the best measured config: of the
  // configs one knob away from it whose changed knob value has fewer than
  // `probe_quota` own measurements, the best-scored. A model trained on a few dozen
  // configs judges a knob value by the few configs that had it, whatever their other
  // knobs; on matmul 256x512x128 a first batch's one config with tile_k = K (the
  // region of every top config) was slow for its other knobs, and runs never
  // measured tile_k = K again. A probe tries such a value in the best config found.
  // A batch with quota picks (structural_quota, which already spends up to half of it
  // on knob values the model cannot judge yet) has no probes. 0: off.
  int incumbent_probes = 1;
  int probe_quota = 4;
  // Configs of one batch differ in at least this many knobs while the model's ranked
  // candidates allow it (1: any two distinct configs; see Propose).
  int min_knob_distance = 2;
  int min_records = 4;              // rows needed before the model is trained
  // Cold (no log model, no other tasks' records), while the task has fewer than
  // `early_batch_rows` measured configs, a Propose returns at most `early_batch`
  // configs, so the model is retrained after every `early_batch` measurements while
  // a few more of them change the most. Cold, ResNet-18's conv2d layers and the ops
  // suite's matmul 256^3, 15 seeds, trials to 95% of the best known (cached numbers):
  // batches of 8 and 8 rows before the first model -> batches of 2 and 4 rows, 0.77x
  // the trials (geometric mean of 13 cases; docs/search.md "Small early batches").
  // The price: on a farm of many agents the first `early_batch_rows` trials of a cold
  // task use `early_batch` of them. 0: off (every Propose fills its n).
  int early_batch = 2;
  int early_batch_rows = 32;
  int max_transfer_records = 3000;  // newest records of other tasks used for training
  // With a log model, the task's own model is still trained on the other tasks'
  // records (up to max_transfer_records, one rank group per task) next to its own, on
  // top of the log model's scores, instead of on its own records alone: a correction
  // learned from 8-64 own configs alone overfits them. Warm from the log, 5 seeds,
  // trials to 95% of the best known: matmul 256^3 26 -> 4, matmul 128x768x192 39 -> 6,
  // the ops suite's conv2d and dense within a trial; ResNet-18's conv2d tasks 28 -> 17
  // on 64->64 3x3, 1-2 -> 3-6 on four others (docs/search.md "Warm start from the
  // shared log", docs/history/benchmarks-2026-11.md).
  bool transfer_with_log_model = true;
  // Threads that lower and extract features of uncached candidates in Score (the
  // search runs between batches, when the machine is otherwise idle).
  int scoring_threads = 2;
  costmodel::XgbParams xgb;
  costmodel::FeatureOptions features;
};

// Not thread-safe; owned by one TuningLoop (or a benchmark).
class ModelPolicy : public SearchPolicy {
 public:
  ModelPolicy(const PolicyContext& context, ModelPolicyOptions options);
  std::string name() const override { return "model"; }
  std::vector<Config> Propose(int n) override;
  std::string last_proposer() const override { return proposer_; }
  std::string last_failure() const override { return failure_; }
  std::vector<std::string> TakeNotices() override { return std::exchange(notices_, {}); }
  void Observe(const std::vector<TuningRecord>& records) override;
  void ObserveOtherTasks(const std::vector<TuningRecord>& records) override;
  // With a log model only when `transfer_with_log_model` (the log model was trained on
  // them all; the fine-tuned model learns its corrections from them too).
  bool WantsOtherTasks() const override {
    return !prior_.trained() || options_.transfer_with_log_model;
  }

  // Retrains now if there is anything new. Ok and no model when there are too few rows.
  absl::Status Retrain();
  // Model scores of configs of this policy's task (higher = predicted faster);
  // invalid configs score -inf. FailedPrecondition when there is no model yet.
  absl::StatusOr<std::vector<float>> Score(const std::vector<Config>& configs);
  const costmodel::XgbModel& model() const { return model_; }
  // True when a log model was loaded (see the class comment).
  bool has_prior() const { return prior_.trained(); }
  // Whether Score can rank: an own model or a log model.
  bool can_score() const { return model_.trained() || prior_.trained(); }
  // Where the own model is kept between jobs (with a ModelStore): ModelKey, followed by
  // "/hw<weight>" when the model is trained on top of the hardware prior.
  std::string OwnModelKey() const;
  // The hardware prior of configs of this task (see ModelPolicyOptions::prior_pool);
  // -inf for a config that does not lower.
  std::vector<float> HardwarePriorOf(const std::vector<Config>& configs);
  double last_train_seconds() const { return last_train_seconds_; }
  int rows() const;

 private:
  // Features of `config` on `task` (cached for this task); false when it does not lower.
  bool FeaturesOf(const TuningTask& task, const Config& config, costmodel::FeatureVector* out);
  // Features of the own task's configs, the uncached ones computed on
  // `scoring_threads` threads; an empty vector for a config that does not lower.
  std::vector<costmodel::FeatureVector> OwnFeatures(const std::vector<Config>& configs);
  std::vector<Config> RandomConfigs(int n);
  // RandomConfigs ranked by the hardware prior (ModelPolicyOptions::prior_pool).
  std::vector<Config> PriorConfigs(int n);
  // The hardware prior of a feature vector (higher = expected faster), from the
  // loop-IR and register-tile features alone; 0 for an empty vector.
  float HardwarePrior(const costmodel::FeatureVector& f) const;
  // One more measured config (with every knob) for each structural knob's value.
  void CountStructural(const Config& config);
  // The quota picks of a batch (ModelPolicyOptions::structural_quota): for each
  // under-measured value of a structural knob, the best of `ranked` (score order) with
  // that value, else the best-scored of random configs with it. Marks them visited.
  using ScoredPool = std::unordered_map<std::string, std::pair<float, Config>>;
  std::vector<Config> StructuralPicks(const std::vector<std::pair<float, std::string>>& ranked,
                                      const ScoredPool& pool, int max_picks);

  // Up to `max_picks` probes (incumbent_probes) of `incumbent`, the best measured
  // config, unvisited, marked visited.
  std::vector<Config> IncumbentProbes(const Config& incumbent, int max_picks);

  PolicyContext context_;
  ConfigSpace space_;
  ModelPolicyOptions options_;
  costmodel::FeatureExtractor extractor_;
  // Indices of the features HardwarePrior reads (-1: not in this layout).
  struct PriorIndex {
    int lanes = -1, has_parallel = -1, parallel_extent = -1, parallel_balance = -1,
        accumulators = -1, register_tile = -1;
  } prior_index_;
  costmodel::XgbModel model_;
  costmodel::XgbModel prior_;  // the log model; untrained when there is none
  bool fine_tuned_ = false;    // model_ was trained on top of prior_ (score = sum)
  // model_ was trained on top of the hardware prior (ModelPolicyOptions::prior_margin).
  bool hardware_margin_ = false;
  std::mt19937_64 rng_;
  std::set<std::string> visited_;
  std::string proposer_ = "model";  // see SearchPolicy::last_proposer
  std::string failure_;             // see SearchPolicy::last_failure
  std::vector<std::string> notices_;  // see SearchPolicy::TakeNotices
  // Own task: best throughput (FLOP/s) per config; 0 = failed.
  std::map<std::string, double> own_;
  // Measured configs (own and other tasks') per structural knob value ("knob=value").
  std::map<std::string, int> structural_count_;
  // Own measured configs per knob value ("knob=value"), every knob (IncumbentProbes).
  std::map<std::string, int> value_count_;
  // Other tasks: rows and throughputs per workload key.
  struct Group {
    std::vector<costmodel::FeatureVector> rows;
    std::vector<double> throughput;
  };
  std::map<std::string, Group> transfer_;
  int transfer_count_ = 0;
  std::unordered_map<std::string, costmodel::FeatureVector> feature_cache_;  // own task
  bool dirty_ = false;
  double last_train_seconds_ = 0;
};

}  // namespace tuneforge
