// ModelPolicy ("model"): the search strategy of model-guided tuning, as in
// AutoTVM/Ansor (MetaSchedule's SearchStrategy); what it asks the CostModel
// (tuner/cost_model.h) is which configs look fastest.
//
//   Observe(records)      -> the measured configs go to the cost model (an update
//                            before the next Propose, i.e. after every batch; cold, the
//                            first batches are small: `early_batch`) and to the
//                            policy's own tally (incumbents, knob values measured)
//   Propose(n)            -> parallel simulated annealing: `chains` walks over the
//                            ConfigSpace (one knob changed per step), scored by the
//                            cost model in batches; the best-scored unvisited configs
//                            seen by any walk fill the batch — no two of them closer
//                            than `min_knob_distance` knobs while candidates last —
//                            except that each slot is a uniform random config with
//                            probability `epsilon`, that a value of a structural
//                            knob (an algorithm) measured fewer than
//                            `structural_quota` times gets slots of its own, and that
//                            a batch without such slots probes the best config
//                            (`incumbent_probes`)
//   ObserveOtherTasks     -> transfer learning: records of other shapes of the same
//                            operator on the same target go to the cost model, so a
//                            new task starts with a useful model
//
// Before the cost model can predict (no log model, too few rows) the policy proposes
// random configs, the hardware prior's best of `prior_pool` draws each. A config is
// never proposed twice, nor one observed.
#pragma once

#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tuner/cost_model.h"
#include "tuner/search_policy.h"

namespace tuneforge {

struct ModelPolicyOptions {
  int chains = 64;                  // parallel simulated-annealing walks
  int steps = 24;                   // steps per walk and Propose
  double epsilon = 0.05;            // share of random picks (exploration)
  // Draws of a second knob that may make a rejected one-knob mutation valid
  // (MutateConfig). 0: a rejected mutation draws another knob instead. Cold, 9 seeds,
  // trials to 95% of the best known: matmul 256^3 53 -> 41, dense 128x768x768 47 -> 26,
  // conv2d unchanged (docs/history/search-2026-11.md "Repaired mutations").
  int repair_tries = 4;
  // Cold (no log model), before the cost model can predict, the random configs are the
  // hardware prior's (CostModel::HardwarePriorOf) best of `prior_pool` x n random
  // draws, no two closer than `min_knob_distance` knobs (nor to a measured one); 0:
  // plain random. With CostModelOptions::hardware_prior_weight, cold, 16 cases
  // (ResNet-18's 12 tasks and the ops suite), 15 seeds, trials to 95% of the best known
  // (cached numbers): 0.48x the trials of neither (geometric mean), the first layer
  // 10 -> 5, 128->256 1x1 s2 10 -> 4, 512@7^2 > 64 -> 9 (docs/search.md "The hardware
  // prior").
  int prior_pool = 8;
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
  CostModelOptions cost_model;
};

// Not thread-safe; owned by one TuningLoop (or a benchmark).
class ModelPolicy : public SearchPolicy {
 public:
  ModelPolicy(const PolicyContext& context, ModelPolicyOptions options);
  std::string name() const override { return "model"; }
  std::vector<Config> Propose(int n) override;
  std::string last_proposer() const override { return proposer_; }
  std::vector<std::string> TakeWarnings() override;
  void Observe(const std::vector<TuningRecord>& records) override;
  void ObserveOtherTasks(const std::vector<TuningRecord>& records) override;
  bool WantsOtherTasks() const override { return cost_model_.WantsOtherTasks(); }

  CostModel& cost_model() { return cost_model_; }
  const CostModel& cost_model() const { return cost_model_; }

 private:
  void Warn(std::string warning);
  std::vector<Config> RandomConfigs(int n);
  // RandomConfigs ranked by the hardware prior (ModelPolicyOptions::prior_pool).
  std::vector<Config> PriorConfigs(int n);
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
  CostModel cost_model_;
  std::mt19937_64 rng_;
  std::set<std::string> visited_;
  std::string proposer_ = "model";    // see SearchPolicy::last_proposer
  std::vector<std::string> warnings_;  // see SearchPolicy::TakeWarnings
  // Measured configs (own and other tasks') per structural knob value ("knob=value").
  std::map<std::string, int> structural_count_;
  // Own measured configs per knob value ("knob=value"), every knob (IncumbentProbes).
  std::map<std::string, int> value_count_;
};

}  // namespace tuneforge
