// TuningLoop: propose, build, measure, record, for one task on one target.
#include "tuner/tuning_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "compiler/reference/reference.h"
#include "compiler/support/log.h"
#include "compiler/support/stats.h"
#include "compiler/support/status.h"
#include "tuner/search_policy.h"

namespace tuneforge {
namespace {

int64_t NowUnixUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The untuned loop nest is slow by nature (seconds per run at 1024^3): one sample,
// no warm-up, and a timeout of its own, so the speedup can always be reported.
MeasureOptions BaselineOptions(MeasureOptions o) {
  o.warmup = 0;
  o.repeat = 1;
  o.timeout_ms = std::max(o.timeout_ms, kBaselineTimeoutMs);
  return o;
}

}  // namespace

WorkloadInfo MakeWorkloadInfo(const TuningTask& task) {
  return WorkloadInfo{task.WorkloadKey(), task.op(), task.CanonicalText(), task.ToJson(),
                      task.Flops()};
}

TargetInfo MakeTargetInfo(const Target& target) {
  return TargetInfo{target.Key(), target.triple, target.cpu, target.features, target.num_threads,
                    target.device_key};
}

uint64_t AlternateSeed(uint64_t seed) { return seed ^ 0x9E3779B97F4A7C15ull; }

absl::StatusOr<std::shared_ptr<const ExpectedOutput>> MakeExpectedOutputFor(
    const TuningTask& task, const ir::LoweredFunc& func, uint64_t seed) {
  auto expected = std::make_shared<ExpectedOutput>();
  const std::vector<InputSpec> inputs = InputSpecs(task);
  size_t next_input = 0;
  for (const ir::BufferParam& param : func.params) {
    expected->buffer_sizes.push_back(param.NumElements());
    if (param.is_output) expected->output_index = static_cast<int>(expected->buffer_sizes.size() - 1);
    expected->internal.push_back(param.is_internal);
    runtime::FillSpec fill = runtime::DefaultFill(ElementTypeOf(param));
    if (!param.is_output && !param.is_internal) {
      // Inputs come first, in InputSpecs' order: the agent fills argument i as the
      // reference filled input i.
      if (next_input >= inputs.size() || inputs[next_input].fill.type != fill.type ||
          inputs[next_input].elements != param.NumElements() ||
          next_input + 1 != expected->buffer_sizes.size()) {
        return absl::InternalError("kernel argument " + param.name + " of " + task.CanonicalText() +
                                   " does not match the reference's inputs");
      }
      fill = inputs[next_input++].fill;
    }
    expected->fills.push_back(fill);
  }
  expected->seed = seed;
  ASSIGN_OR_RETURN(HostBuffer values, TypedReferenceOutput(task, MakeTypedInputs(task, seed)));
  expected->values = values.Bytes();
  expected->alternate_seed = AlternateSeed(seed);
  ASSIGN_OR_RETURN(HostBuffer alternate, TypedReferenceOutput(task, MakeTypedInputs(task, expected->alternate_seed)));
  expected->alternate_values = alternate.Bytes();
  const Tolerance tol = ToleranceFor(task);
  expected->atol = tol.atol;
  expected->rtol = tol.rtol;
  return expected;
}

absl::StatusOr<std::shared_ptr<const ExpectedOutput>> MakeExpectedOutput(const TuningTask& task,
                                                                         const Target& target,
                                                                         const Template& tmpl,
                                                                         uint64_t seed) {
  ASSIGN_OR_RETURN(ir::LoweredFunc naive, tmpl.Instantiate(task, target, tmpl.Naive(task, target)));
  return MakeExpectedOutputFor(task, naive, seed);
}

Target TargetOfRecord(const TargetInfo& t) {
  return Target{t.triple, t.cpu, t.features, t.num_threads, t.device_key};
}

TuningLoop::TuningLoop(TuningTask task, Target target, TuningOptions options, Database* db,
                       const Builder* builder, Runner* runner)
    : task_(std::move(task)),
      target_(std::move(target)),
      options_(std::move(options)),
      db_(db),
      builder_(builder),
      runner_(runner) {}

TrialSummary TuningLoop::Summarise(const TuningRecord& r) const {
  double s = r.result.MedianCost();
  return TrialSummary{r.config_json, s, task_.Flops() / s / 1e9, r.id};
}

TuningRecord TuningLoop::MakeRecord(const Config& config, const MeasureResult& result,
                                    const std::string& proposed_by) const {
  TuningRecord r;
  r.workload = MakeWorkloadInfo(task_);
  r.target = MakeTargetInfo(target_);
  r.template_name = template_->name();
  r.template_version = template_->version();
  r.config_json = config.ToJson();
  r.result = result;
  r.job_id = options_.job_id;
  r.proposed_by = proposed_by;
  return r;
}

absl::StatusOr<std::vector<TuningRecord>> TuningLoop::RunBatch(
    const std::vector<Candidate>& candidates, const std::string& proposed_by) {
  std::vector<BuildResult> built;
  {
    ScopedTimer timer("build batch");
    built = builder_->Build(task_, *template_, target_, candidates);
  }
  std::vector<MeasureInput> inputs;
  std::vector<size_t> input_of;  // built index -> inputs index, or npos
  for (const BuildResult& b : built) {
    if (b.error != MeasureErrorKind::kNone) {
      input_of.push_back(std::string::npos);
      continue;
    }
    build_seconds_.push_back(b.build_seconds);
    input_of.push_back(inputs.size());
    inputs.push_back(MeasureInput{task_.CanonicalText(), b.candidate.config.ToJson(), b.artifact,
                                  expected_,
                                  b.candidate.is_baseline ? BaselineOptions(options_.measure)
                                                          : options_.measure});
  }
  std::vector<MeasureResult> measured;
  if (!inputs.empty()) {
    ScopedTimer timer("measure batch");
    measured = runner_->Measure(inputs);
    TF_CHECK(measured.size() == inputs.size(), "runner returned ", measured.size(), " results for ",
             inputs.size(), " inputs");
  }
  std::vector<TuningRecord> records;
  for (size_t i = 0; i < built.size(); ++i) {
    MeasureResult result;
    if (input_of[i] == std::string::npos) {
      result.error = built[i].error;
      result.error_message = built[i].error_message;
      result.start_unix_us = result.end_unix_us = NowUnixUs();
    } else {
      result = measured[input_of[i]];
      artifacts_[built[i].candidate.config.ToJson()] = built[i].artifact;
    }
    result.build_seconds = built[i].build_seconds;
    records.push_back(MakeRecord(built[i].candidate.config, result, proposed_by));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> ids, db_->Commit(records));
  for (size_t i = 0; i < records.size(); ++i) records[i].id = ids[i];
  return records;
}

void TuningLoop::Account(const std::vector<TuningRecord>& records, bool count_trials) {
  for (const TuningRecord& r : records) {
    ++progress_.records;
    if (count_trials) ++progress_.trials_done;
    if (r.result.error != MeasureErrorKind::kNone) {
      ++progress_.errors;
      if (count_trials) ++progress_.trials_since_improvement;
      continue;
    }
    measured_.push_back(r);
    TrialSummary s = Summarise(r);
    if (!progress_.best || s.seconds < progress_.best->seconds) {
      progress_.best = s;
      if (count_trials) progress_.trials_since_improvement = -1;  // this one improved
    }
    if (count_trials) ++progress_.trials_since_improvement;
  }
  progress_.median_build_seconds = MedianOr(build_seconds_, 0);
}

absl::StatusOr<std::vector<TuningRecord>> OtherShapeRecords(Database& db, const TuningTask& task,
                                                            const Target& target) {
  std::vector<TuningRecord> out;
  ASSIGN_OR_RETURN(std::vector<WorkloadSummary> list, db.List());
  for (const WorkloadSummary& w : list) {
    if (w.workload.op != task.op() || w.target.key != target.Key() || w.workload.key == task.WorkloadKey())
      continue;
    ASSIGN_OR_RETURN(std::vector<TuningRecord> records, db.Records(w.workload.key, target.Key()));
    for (TuningRecord& r : records)
      if (!r.UntrustedUpload()) out.push_back(std::move(r));  // no training on claims
  }
  // Commit order across the shapes, so that the caps of ModelPolicy::ObserveOtherTasks
  // and TrainLogModel keep the newest records, not one shape's.
  std::sort(out.begin(), out.end(), [](const TuningRecord& a, const TuningRecord& b) { return a.id < b.id; });
  return out;
}

std::vector<Config> TuningLoop::WarmStartConfigs(const ConfigSpace& space,
                                                 const std::vector<TuningRecord>& previous) const {
  if (!options_.heuristics) return {};
  std::set<std::string> seen;
  for (const TuningRecord& r : previous)
    if (r.template_name == template_->name() && r.template_version == template_->version())
      seen.insert(r.config_json);
  return HeuristicConfigs(*template_, task_, target_, space,
                          static_cast<size_t>(std::max(1, options_.trials / 4)), std::move(seen));
}

std::vector<Config> HeuristicConfigs(const Template& tmpl, const TuningTask& task,
                                     const Target& target, const ConfigSpace& space, size_t cap,
                                     std::set<std::string> skip) {
  std::vector<Config> out;
  for (Config& c : tmpl.Heuristics(task, target)) {
    if (out.size() >= cap) break;
    if (space.Check(c).ok() && skip.insert(c.ToJson()).second) out.push_back(std::move(c));
  }
  return out;
}

absl::Status TuningLoop::Remeasure(const std::atomic<bool>* cancel) {
  // Distinct configs by their best measured median, best first, with that median.
  std::vector<const TuningRecord*> order;
  for (const TuningRecord& r : measured_) order.push_back(&r);
  std::sort(order.begin(), order.end(), [](const TuningRecord* a, const TuningRecord* b) {
    return a->result.MedianCost() < b->result.MedianCost();
  });
  std::map<std::string, double> search_cost;
  auto best_configs = [&](int k) {
    std::vector<std::string> top;
    for (const TuningRecord* r : order) {
      if (static_cast<int>(top.size()) >= k) break;
      if (std::find(top.begin(), top.end(), r->config_json) == top.end() &&
          artifacts_.count(r->config_json)) {
        top.push_back(r->config_json);
        search_cost[r->config_json] = r->result.MedianCost();
      }
    }
    return top;
  };
  std::vector<std::string> top = best_configs(options_.top_k_remeasure);
  if (top.size() < 2) return absl::OkStatus();  // nothing to choose between

  // Interleaved: every round measures each config still short of `rounds` rounds once,
  // so drift hits all alike.
  std::map<std::string, std::vector<double>> costs;         // every re-measured sample
  std::map<std::string, std::vector<double>> round_costs;   // each round's median
  std::map<std::string, TuningRecord> last_record;
  std::set<std::string> failed;
  auto measure_rounds = [&](const std::vector<std::string>& configs, int rounds) -> absl::Status {
    for (;;) {
      if (cancel && cancel->load()) return absl::OkStatus();
      std::vector<std::string> batch;
      for (const std::string& config : configs) {
        if (static_cast<int>(round_costs[config].size()) < rounds) batch.push_back(config);
      }
      if (batch.empty()) return absl::OkStatus();
      std::vector<MeasureInput> inputs;
      for (const std::string& config : batch) {
        inputs.push_back(MeasureInput{task_.CanonicalText(), config, artifacts_[config], expected_,
                                      options_.measure});
      }
      std::vector<MeasureResult> results = runner_->Measure(inputs);
      std::vector<TuningRecord> records;
      for (size_t i = 0; i < batch.size(); ++i) {
        absl::StatusOr<Config> config = Config::FromJson(batch[i]);
        TF_CHECK(config.ok());
        records.push_back(MakeRecord(*config, results[i], "remeasure"));
      }
      ASSIGN_OR_RETURN(std::vector<int64_t> ids, db_->Commit(records));
      for (size_t i = 0; i < records.size(); ++i) {
        records[i].id = ids[i];
        ++progress_.records;
        if (records[i].result.error != MeasureErrorKind::kNone) {
          ++progress_.errors;
          failed.insert(batch[i]);  // a finalist that fails once cannot win
          round_costs[batch[i]].push_back(INFINITY);
          continue;
        }
        for (double c : records[i].result.costs) costs[batch[i]].push_back(c);
        round_costs[batch[i]].push_back(records[i].result.MedianCost());
        last_record[batch[i]] = records[i];
      }
    }
  };
  RETURN_IF_ERROR(measure_rounds(top, options_.remeasure_rounds));

  // How much the finalists' figures disagree: their search figure and round medians.
  std::vector<double> spreads;
  for (const std::string& config : top) {
    std::vector<double> figures = round_costs[config];
    figures.push_back(search_cost[config]);
    const auto [lo, hi] = std::minmax_element(figures.begin(), figures.end());
    if (std::isfinite(*hi)) spreads.push_back((*hi - *lo) / MedianOr(figures, 1));
  }
  const double spread = MedianOr(spreads, 0);
  std::vector<std::string> finalists = top;
  if (options_.noisy_spread > 0 && spread > options_.noisy_spread) {
    std::vector<std::string> wide = best_configs(std::max<int>(options_.noisy_top_k, top.size()));
    const int rounds = std::max(options_.noisy_rounds, options_.remeasure_rounds);
    int extra = 0;
    for (const std::string& config : wide) extra += rounds - static_cast<int>(round_costs[config].size());
    if (extra > 0 && extra <= options_.noisy_max_share * options_.trials) {
      finalists = wide;
      RETURN_IF_ERROR(measure_rounds(finalists, rounds));
    }
  }

  std::string winner;
  double winner_cost = INFINITY;
  for (const std::string& config : finalists) {
    double m = MedianOr(costs[config], 0);
    if (m < winner_cost && last_record.count(config) && !failed.count(config)) {
      winner = config;
      winner_cost = m;
    }
  }
  if (winner.empty()) return absl::OkStatus();
  TrialSummary s = Summarise(last_record[winner]);
  s.seconds = winner_cost;
  s.gflops = task_.Flops() / winner_cost / 1e9;
  progress_.best = s;
  std::ostringstream event;
  event << "re-measured top " << top.size() << " interleaved x" << options_.remeasure_rounds;
  if (finalists.size() > top.size() || round_costs[top[0]].size() > static_cast<size_t>(options_.remeasure_rounds)) {
    event << " (their figures disagree by " << std::lround(100 * spread) << "%: widened to top "
          << finalists.size() << " x" << round_costs[finalists[0]].size() << ")";
  }
  event << ": winner " << winner << " at " << s.gflops << " GFLOP/s";
  progress_.last_event = event.str();
  TF_LOG(Info) << progress_.last_event;
  progress_.finalist_spread = spread;
  progress_.finalists = static_cast<int>(finalists.size());
  return absl::OkStatus();
}

absl::StatusOr<TuningProgress> TuningLoop::MeasureFixedConfigs(const ConfigSpace& space) {
  std::vector<Candidate> candidates;
  for (const std::string& text : options_.fixed_configs) {
    ASSIGN_OR_RETURN(Config config, Config::FromJson(text));
    absl::Status valid = space.Check(config);
    if (!valid.ok()) {
      return absl::InvalidArgumentError("config " + text + " is not valid for " +
                                        template_->name() + " v" +
                                        std::to_string(template_->version()) + ": " +
                                        std::string(valid.message()));
    }
    candidates.push_back(Candidate{std::move(config), false});
  }
  ASSIGN_OR_RETURN(std::vector<TuningRecord> records, RunBatch(candidates, "fixed"));
  Account(records, /*count_trials=*/true);
  progress_.last_event = "measured " + std::to_string(records.size()) + " given config(s)";
  if (on_progress_) on_progress_(progress_);
  return progress_;
}

absl::StatusOr<TuningProgress> TuningLoop::Run(const ProgressCallback& on_progress,
                                               const std::atomic<bool>* cancel) {
  on_progress_ = on_progress;
  auto report = [&](const std::string& event) {
    progress_.last_event = event;
    TF_LOG(Info) << event;
    if (on_progress_) on_progress_(progress_);
  };
  ASSIGN_OR_RETURN(template_, FindTemplate(task_));
  ConfigSpace space = template_->Space(task_, target_);
  PolicyContext policy_context{task_, target_, template_, options_.seed, options_.model_store,
                               options_.model_early_batch};
  std::unique_ptr<SearchPolicy> owned_policy;
  SearchPolicy* policy = options_.policy_override;
  if (!policy) {
    ASSIGN_OR_RETURN(owned_policy, MakeSearchPolicy(options_.policy, policy_context));
    policy = owned_policy.get();
  }

  // The expected output, computed once per job by the reference implementation.
  const Config naive = template_->Naive(task_, target_);
  ASSIGN_OR_RETURN(expected_, MakeExpectedOutput(task_, target_, *template_, options_.seed));

  // Configs this (workload, target) already has records for are not measured again.
  ASSIGN_OR_RETURN(std::vector<TuningRecord> previous,
                   db_->Records(task_.WorkloadKey(), target_.Key()));
  // A user's uploaded record is a claim, not a measurement of this farm: its config
  // counts as not measured, so the search may measure it (then it can be best).
  previous.erase(std::remove_if(previous.begin(), previous.end(),
                                [](const TuningRecord& r) { return r.UntrustedUpload(); }),
                 previous.end());
  policy->Observe(previous);
  // Only a policy that learns from other tasks gets them; the others skip the db reads.
  if (options_.transfer_learning && policy->WantsOtherTasks() && options_.fixed_configs.empty()) {
    ASSIGN_OR_RETURN(std::vector<TuningRecord> others, OtherShapeRecords(*db_, task_, target_));
    policy->ObserveOtherTasks(others);
    if (!others.empty())
      TF_LOG(Info) << "transfer learning: " << others.size()
                   << " records of other shapes of " << task_.op() << " on this target";
  }
  if (options_.count_earlier && options_.fixed_configs.empty()) {
    std::set<std::string> configs;
    const std::string naive_json = naive.ToJson();
    for (const TuningRecord& r : previous) {
      if (r.template_name == template_->name() && r.template_version == template_->version() &&
          r.config_json != naive_json)
        configs.insert(r.config_json);
    }
    progress_.earlier_trials = static_cast<int>(configs.size());
    // The best so far by the db's noise-aware ranking: what the executor and deploy use.
    ASSIGN_OR_RETURN(std::vector<RankedConfig> ranked, db_->TopK(task_.WorkloadKey(), target_.Key(), 1));
    if (!ranked.empty()) {
      TrialSummary best = Summarise(ranked[0].record);
      best.seconds = ranked[0].median_cost;
      best.gflops = task_.Flops() / best.seconds / 1e9;
      progress_.earlier_best = best;
    }
    options_.trials -= progress_.earlier_trials;
    if (options_.trials <= 0) {
      // The budget was spent by earlier jobs: report their best, measure nothing.
      progress_.best = progress_.earlier_best;
      report(std::to_string(progress_.earlier_trials) +
             " configs already measured for this task and target: nothing left to measure");
      return progress_;
    }
  }
  report("tuning " + task_.CanonicalText() + " on " + target_.ToString() + " with " +
         policy->name() + " search, " + std::to_string(options_.trials) + " trials; " +
         std::to_string(space.knobs().size()) + " knobs, " + std::to_string(previous.size()) +
         " earlier records");

  if (!options_.fixed_configs.empty()) return MeasureFixedConfigs(space);

  // The untuned baseline is measured once per (workload, target): a later job of the
  // same task (e.g. the next round of `tune --tasks`, or a resumed job) reuses the
  // stored measurement instead of spending seconds re-timing the plain loop nest.
  const TuningRecord* stored_baseline = nullptr;
  for (const TuningRecord& r : previous)
    if (r.result.error == MeasureErrorKind::kNone && r.template_name == template_->name() &&
        r.template_version == template_->version() && r.config_json == naive.ToJson() &&
        (!stored_baseline || r.result.MedianCost() < stored_baseline->result.MedianCost()))
      stored_baseline = &r;
  if (stored_baseline) {
    progress_.baseline = Summarise(*stored_baseline);
    report("baseline (untuned loop nest, stored record " + std::to_string(stored_baseline->id) +
           "): " + std::to_string(progress_.baseline->gflops) + " GFLOP/s");
  } else {
    ASSIGN_OR_RETURN(std::vector<TuningRecord> baseline, RunBatch({Candidate{naive, true}}, "baseline"));
    policy->Observe(baseline);
    progress_.records += 1;
    if (baseline[0].result.error == MeasureErrorKind::kNone) {
      progress_.baseline = Summarise(baseline[0]);
      report("baseline (untuned loop nest): " + std::to_string(progress_.baseline->gflops) +
             " GFLOP/s");
    } else {
      ++progress_.errors;
      report(std::string("baseline failed: ") + MeasureErrorKindName(baseline[0].result.error) +
             ": " + baseline[0].result.error_message);
    }
  }

  int batch = options_.batch_size > 0 ? options_.batch_size
                                      : std::max(8, 2 * runner_->Parallelism());
  // One batch of trials: build, measure, commit, let the policy observe; true when the
  // early-stop rule says the job is done.
  auto trial_batch = [&](std::vector<Config> configs, const std::string& proposed_by,
                         const std::string& note) -> absl::StatusOr<bool> {
    std::vector<Candidate> candidates;
    for (Config& c : configs) candidates.push_back(Candidate{std::move(c), false});
    ASSIGN_OR_RETURN(std::vector<TuningRecord> records, RunBatch(candidates, proposed_by));
    policy->Observe(records);
    Account(records, /*count_trials=*/true);
    std::ostringstream event;
    event << "trial " << progress_.trials_done << "/" << options_.trials << note;
    if (progress_.best) event << ": best " << progress_.best->gflops << " GFLOP/s";
    event << ", " << progress_.errors << " failed";
    report(event.str());
    if (options_.early_stop > 0 && progress_.trials_since_improvement >= options_.early_stop) {
      progress_.early_stopped = true;
      report("early stop: no improvement in " + std::to_string(progress_.trials_since_improvement) +
             " trials");
      return true;
    }
    return false;
  };

  // Warm start with the template's heuristics, in batches like the search. The policy
  // observes them, so it never proposes them again and the model trains on them.
  const std::vector<Config> warm = WarmStartConfigs(space, previous);
  bool stopped = false;
  for (size_t begin = 0; begin < warm.size() && !stopped; begin += batch) {
    if (cancel && cancel->load()) return absl::CancelledError("job cancelled");
    const size_t end = std::min(warm.size(), begin + batch);
    ASSIGN_OR_RETURN(stopped, trial_batch({warm.begin() + begin, warm.begin() + end}, "heuristic",
                                          " (heuristic configs " + std::to_string(end) + "/" +
                                              std::to_string(warm.size()) + ")"));
  }
  auto warn = [&](std::string failure) {
    failure = failure.substr(0, failure.find('\n'));
    const std::string kind = failure.substr(0, failure.find(':'));
    if (!failure.empty() &&
        std::none_of(progress_.warnings.begin(), progress_.warnings.end(),
                     [&](const std::string& w) { return w.substr(0, w.find(':')) == kind; })) {
      progress_.warnings.push_back(failure);
      report("warning: " + failure);
    }
  };
  while (!stopped && progress_.trials_done < options_.trials) {
    if (cancel && cancel->load()) return absl::CancelledError("job cancelled");
    int n = std::min(batch, options_.trials - progress_.trials_done);
    std::vector<Config> configs = policy->Propose(n);
    // A policy that could not work as designed says so in the job's status (and each
    // record names what really proposed it), never only in a log line.
    // One warning per kind of failure (the text before the first ':'; the details,
    // e.g. a library's timestamps, differ from batch to batch), first line only.
    for (std::string& warning : policy->TakeWarnings()) warn(std::move(warning));
    if (configs.empty()) {
      report("search space exhausted after " + std::to_string(progress_.trials_done) + " trials");
      break;
    }
    ASSIGN_OR_RETURN(stopped, trial_batch(std::move(configs), policy->last_proposer(), ""));
  }
  for (std::string& warning : policy->TakeWarnings()) warn(std::move(warning));  // a job that never proposed
  if (cancel && cancel->load()) return absl::CancelledError("job cancelled");
  RETURN_IF_ERROR(Remeasure(cancel));
  if (on_progress_) on_progress_(progress_);
  return progress_;
}

}  // namespace tuneforge
