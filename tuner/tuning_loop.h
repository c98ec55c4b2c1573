// The tuning loop for one TuningTask on one Target:
//
//   baseline = measure(template.Naive)
//   warm start: measure the template's Heuristics() (at most a quarter of the budget)
//   repeat until the budget is spent:
//     candidates = policy.Propose(batch)
//     artifacts  = builder.Build(candidates)
//     results    = runner.Measure(artifacts)
//     records    = db.Commit(...)
//     policy.Observe(records)
//   re-measure the top-k interleaved; the winner is best by the re-measurement
//
// Not thread-safe; one TuningLoop per job, run on the job's thread.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/target/target.h"
#include "compiler/task/task.h"
#include "db/database.h"
#include "tuner/builder.h"
#include "tuner/model_store.h"
#include "tuner/runner.h"
#include "tuner/search_policy.h"

namespace tuneforge {

struct TuningOptions {
  int trials = 200;           // candidates measured (baseline and re-measurements excluded)
  int batch_size = 0;         // 0: 2 x runner parallelism, at least 8
  uint64_t seed = 1;
  std::string policy = "model";  // see SearchPolicyNames()
  int early_stop = 0;         // stop after this many trials without a new best; 0 = never
  // Warm start: spend up to a quarter of the budget (at least one trial) on the
  // template's heuristic configs (the ones a vendor library would pick) before the
  // policy proposes anything, so a short budget never ends worse than the heuristics.
  // They count as trials; configs already in the db are skipped.
  bool heuristics = true;
  // Train the model on the db's records of other shapes of the op on this target.
  bool transfer_learning = true;
  ModelStore* model_store = nullptr;  // optional, not owned: cost models between jobs
  // The model policy's batch while cold (ModelPolicyOptions::early_batch); unset: its
  // default, 0: full batches from the first trial.
  std::optional<int> model_early_batch;
  // Optional, not owned: search with this policy instead of the one named by `policy`
  // (tests and benchmarks that configure a policy themselves).
  SearchPolicy* policy_override = nullptr;
  MeasureOptions measure;
  int top_k_remeasure = 3;    // candidates re-measured at the end
  int remeasure_rounds = 2;   // interleaved rounds of re-measurement
  // A noisy machine: when the finalists' figures disagree by more than `noisy_spread`
  // (the median over finalists of (max - min) / median of their search figure and
  // round medians; a quiet machine's are within 2-3%), the best `noisy_top_k` configs
  // are re-measured, interleaved, until each has `noisy_rounds` rounds (24 more
  // measurements), and the winner is the best median over them. With figures 10-20%
  // apart from one measurement to the next, the top 3 by single figures are largely
  // the luckiest draws and 2 rounds do not tell them apart (docs/search.md "Finalists
  // on a noisy machine"). Only when the extra measurements are at most
  // `noisy_max_share` of `trials` (with the defaults: jobs of 48 trials or more); a
  // short job keeps the top 3 x 2. 0: never widen.
  double noisy_spread = 0.05;
  int noisy_top_k = 5;
  int noisy_rounds = 6;
  double noisy_max_share = 0.5;
  std::string job_id;
  // When set, measure exactly these configs (no baseline, no search, no
  // re-measurement): the nightly canary re-measures last night's best this way.
  std::vector<std::string> fixed_configs;
  // `trials` counts the configs this (workload, target) already has records of (the
  // template's current version; the baseline and untrusted uploads excluded): the job
  // measures only the rest, or nothing. `tune --model` resumes a model this way.
  bool count_earlier = false;
};

struct TrialSummary {
  std::string config_json;
  double seconds = 0;  // median cost
  double gflops = 0;
  int64_t record_id = 0;
};

// What a job reports while it runs and at the end.
struct TuningProgress {
  int trials_done = 0;
  int records = 0;
  int errors = 0;
  int trials_since_improvement = 0;  // for early stopping
  bool early_stopped = false;
  std::optional<TrialSummary> best;
  std::optional<TrialSummary> baseline;
  double median_build_seconds = 0;
  std::string last_event;
  // The end's re-measurement: how much the first finalists' figures disagreed
  // (TuningOptions::noisy_spread) and how many configs it timed in the end.
  double finalist_spread = 0;
  int finalists = 0;
  // Distinct failures of the search policy (e.g. "cost model training failed, proposed
  // at random: ..."), in order of first occurrence.
  std::vector<std::string> warnings;
  // With TuningOptions::count_earlier: the configs measured before this job and the
  // best of them by the db's noise-aware ranking (Database::TopK).
  int earlier_trials = 0;
  std::optional<TrialSummary> earlier_best;
};

// The records `db` holds of `task`'s operator on `target` in other shapes (workloads),
// untrusted uploads left out, oldest first (commit order): what a job's transfer
// learning starts from, and `bench search --log`'s warm runs.
absl::StatusOr<std::vector<TuningRecord>> OtherShapeRecords(Database& db, const TuningTask& task,
                                                            const Target& target);

// The template's heuristic configs for `task` that are valid in `space` and not in
// `skip` (config JSON), in the template's order, at most `cap`: what a tuning job
// measures first (TuningOptions::heuristics); `bench search --heuristics` too.
std::vector<Config> HeuristicConfigs(const Template& tmpl, const TuningTask& task,
                                     const Target& target, const ConfigSpace& space, size_t cap,
                                     std::set<std::string> skip = {});

class TuningLoop {
 public:
  using ProgressCallback = std::function<void(const TuningProgress&)>;

  TuningLoop(TuningTask task, Target target, TuningOptions options, Database* db,
             const Builder* builder, Runner* runner);

  // Runs to completion (or until `cancel` becomes true). Errors are for things that
  // make tuning impossible (no template, db write failure); failed candidates are
  // records, not errors.
  absl::StatusOr<TuningProgress> Run(const ProgressCallback& on_progress,
                                     const std::atomic<bool>* cancel = nullptr);

 private:
  // Builds, measures and commits one batch; returns the committed records.
  // `proposed_by` goes into each record's provenance (TuningRecord::proposed_by).
  absl::StatusOr<std::vector<TuningRecord>> RunBatch(const std::vector<Candidate>& candidates,
                                                     const std::string& proposed_by);
  TuningRecord MakeRecord(const Config& config, const MeasureResult& result,
                          const std::string& proposed_by) const;
  void Account(const std::vector<TuningRecord>& records, bool count_trials);
  absl::Status Remeasure(const std::atomic<bool>* cancel);
  absl::StatusOr<TuningProgress> MeasureFixedConfigs(const ConfigSpace& space);
  TrialSummary Summarise(const TuningRecord& r) const;
  // The template's heuristic configs not yet measured for this (workload, target),
  // capped at the warm-start share of the budget.
  std::vector<Config> WarmStartConfigs(const ConfigSpace& space,
                                       const std::vector<TuningRecord>& previous) const;

  TuningTask task_;
  Target target_;
  TuningOptions options_;
  Database* db_;
  const Builder* builder_;
  Runner* runner_;
  const Template* template_ = nullptr;
  std::shared_ptr<const ExpectedOutput> expected_;
  TuningProgress progress_;
  std::vector<double> build_seconds_;
  std::vector<TuningRecord> measured_;  // successful records of this run
  std::map<std::string, std::shared_ptr<const Artifact>> artifacts_;  // by config, for re-measuring
  ProgressCallback on_progress_;
};

// Helpers shared with the CLI and server.
WorkloadInfo MakeWorkloadInfo(const TuningTask& task);
TargetInfo MakeTargetInfo(const Target& target);
// The Target a record was measured on (the inverse of MakeTargetInfo).
Target TargetOfRecord(const TargetInfo& t);

// What every candidate of `task` must compute: the reference outputs on the inputs of
// `seed` and of its alternate (AlternateSeed), the buffer sizes of `func` (one
// instantiation of the task's template) and the task's tolerance.
absl::StatusOr<std::shared_ptr<const ExpectedOutput>> MakeExpectedOutputFor(
    const TuningTask& task, const ir::LoweredFunc& func, uint64_t seed);
// The same for the template's naive kernel: once per job (TuningLoop), or per
// benchmark (bench noise).
absl::StatusOr<std::shared_ptr<const ExpectedOutput>> MakeExpectedOutput(const TuningTask& task,
                                                                         const Target& target,
                                                                         const Template& tmpl,
                                                                         uint64_t seed);
// The seed of the second input set: differs from `seed`, fixed so that a job's
// requests are reproducible.
uint64_t AlternateSeed(uint64_t seed);

}  // namespace tuneforge
