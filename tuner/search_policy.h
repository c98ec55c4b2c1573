// SearchPolicy: proposes the next Configs to measure and learns from results.
//
// Policies (MakeSearchPolicy names):
//   random  RandomPolicy   uniform valid configs                    (this file)
//   grid    GridPolicy     every point once, in a scrambled order   (this file)
//   ga      GeneticPolicy  genetic algorithm on measured configs    (tuner/ga_policy.h)
//   model   ModelPolicy    simulated annealing guided by the CostModel  (tuner/model_policy.h,
//                          tuner/cost_model.h)
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/target/target.h"
#include "compiler/task/task.h"
#include "compiler/templates/config_space.h"
#include "compiler/templates/template.h"
#include "db/record.h"

namespace tuneforge {

class ModelStore;

// Not thread-safe; owned by one TuningLoop.
class SearchPolicy {
 public:
  virtual ~SearchPolicy() = default;
  virtual std::string name() const = 0;
  // Up to `n` configs never proposed before: fewer when the space runs out or when the
  // policy wants a smaller batch (ModelPolicy's early batches); empty only when the
  // space is exhausted.
  virtual std::vector<Config> Propose(int n) = 0;
  // Tells the policy about measured configs of its task (also ones it did not propose,
  // e.g. the baseline or records loaded from the db), so it never proposes them.
  virtual void Observe(const std::vector<TuningRecord>& records) = 0;
  // Records of other tasks of the same operator and target (transfer learning). Policies
  // without a model ignore them.
  virtual void ObserveOtherTasks(const std::vector<TuningRecord>& records) {}
  // Whether ObserveOtherTasks would use them: the caller skips reading them otherwise.
  virtual bool WantsOtherTasks() const { return false; }
  // What proposed the configs of the last Propose call, kept in each record's
  // provenance (TuningRecord::proposed_by): the policy's name, or "<name>:random"
  // when it proposed at random instead (e.g. a cost model not trained yet, or failing).
  virtual std::string last_proposer() const { return name(); }
  // What could not work as designed since the last call, each said once: a Propose
  // that fell back to random because the cost model failed to train or score (the
  // records then say "<name>:random"), a stored cost model that could not be loaded or
  // saved. A model not trained yet is by design, not a warning. The tuning loop puts
  // them in the job's warnings; they are never only log lines.
  virtual std::vector<std::string> TakeWarnings() { return {}; }
};

// Everything a policy may need to know about what it searches.
struct PolicyContext {
  TuningTask task;
  Target target;
  const Template* tmpl = nullptr;  // not owned; templates are static
  uint64_t seed = 1;
  ModelStore* model_store = nullptr;  // optional, not owned: where "model" keeps its model
  // "model": ModelPolicyOptions::early_batch when set (0: full batches from the start).
  std::optional<int> model_early_batch;
};

// Appends uniformly random valid configs not in `visited` to `out` (and to
// `visited`) until `out` holds `n`, or the space seems exhausted.
void SampleUnvisited(const ConfigSpace& space, int n, std::mt19937_64* rng,
                     std::set<std::string>* visited, std::vector<Config>* out);
// A neighbour of `config` in `space`: one knob at another of its values. When the
// space's constraint rejects that change (a taller register tile than the accumulator
// registers allow at the current width), up to `repair_tries` draws of a second knob at
// a random value try to make it valid while keeping the first change, so a walk crosses
// invalid middles (from a 6-row x 4-vector tile to 8 x 2 in one move); a change of a
// structural knob (Knob::structural) is not repaired. Up to 8 changes are drawn;
// `config` itself when none gives a valid neighbour.
Config MutateConfig(const ConfigSpace& space, const Config& config, int repair_tries,
                    std::mt19937_64* rng);
// How many of `space`'s knobs two configs set differently (a knob one of them lacks
// counts when the other sets it).
int KnobDistance(const ConfigSpace& space, const Config& a, const Config& b);

// Picks a diverse batch from candidates in rank order (best first): a candidate that
// differs from every config already in the batch in at least `min_distance` knobs;
// only when those run out, the ones skipped for being near, in rank order. Otherwise a
// batch fills with variants of one config in knobs the cost model cannot tell apart
// (its scores tie) and measures one point eight times. One picker per batch; used by
// ModelPolicy::Propose and the simulated search of tuner/model_eval_test.cc.
class DiversePicker {
 public:
  DiversePicker(const ConfigSpace& space, int min_distance) : space_(space), min_distance_(min_distance) {}
  // The index into `ranked` of the next pick, given the batch so far; `taken(i)`: the
  // candidate may not be picked (measured, or picked before). None when no candidate
  // is left. `ranked` must be the same at every call.
  std::optional<size_t> Next(const std::vector<const Config*>& ranked, const std::vector<Config>& batch,
                             const std::function<bool(size_t)>& taken);

 private:
  const ConfigSpace& space_;
  int min_distance_;
  size_t next_ranked_ = 0, next_skipped_ = 0;
  std::vector<size_t> skipped_;
};

// Uniform random valid configs, no repeats.
class RandomPolicy : public SearchPolicy {
 public:
  RandomPolicy(ConfigSpace space, uint64_t seed);
  std::string name() const override { return "random"; }
  std::vector<Config> Propose(int n) override;
  void Observe(const std::vector<TuningRecord>& records) override;

 private:
  ConfigSpace space_;
  std::mt19937_64 rng_;
  std::set<std::string> visited_;  // Config::ToJson of everything proposed or observed
};

// Grid search: walks every point of the space exactly once, skipping invalid and
// visited ones. The walk is index = (start + i * stride) mod RawSize with a stride
// coprime to RawSize (both from the seed), so a short budget samples all knobs rather
// than only the fastest-varying one of the mixed-radix order.
class GridPolicy : public SearchPolicy {
 public:
  GridPolicy(ConfigSpace space, uint64_t seed);
  std::string name() const override { return "grid"; }
  std::vector<Config> Propose(int n) override;
  void Observe(const std::vector<TuningRecord>& records) override;

 private:
  ConfigSpace space_;
  uint64_t raw_size_;
  uint64_t start_, stride_;
  uint64_t next_ = 0;  // steps taken
  std::set<std::string> visited_;
};

// Policy names MakeSearchPolicy accepts, for --help and validation.
const std::vector<std::string>& SearchPolicyNames();
// "model" is the default (empty name). InvalidArgument for unknown names.
absl::StatusOr<std::unique_ptr<SearchPolicy>> MakeSearchPolicy(const std::string& name,
                                                               const PolicyContext& context);
// The policies that need nothing but the space: "random" (also the empty name) and
// "grid". Kept for callers that only sample a space (e.g. bench kernels).
absl::StatusOr<std::unique_ptr<SearchPolicy>> MakeSearchPolicy(const std::string& name,
                                                               ConfigSpace space, uint64_t seed);

}  // namespace tuneforge
