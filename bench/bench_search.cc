// `tuneforge bench search`: random search against the model-based policy with the same
// budget and seeds, on real kernels measured in this process (no server, no agent, no
// db), so the comparison runs in minutes on a small machine.
//
// For each case and seed, each policy runs Propose -> Builder.Build -> InProcessRunner
// -> Observe until the budget is spent. Measurements are cached by config across
// policies and seeds, so both policies see the same number for the same config (and
// the machine's noise cannot favour one of them). The cost model is then evaluated on
// held-out records of the case (pairwise accuracy, recall@k, both objectives), and its
// training time and scoring throughput are measured.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/codegen/build.h"
#include "compiler/frontend/onnx_reader.h"
#include "compiler/graph/graph.h"
#include "compiler/graph/tasks.h"
#include "compiler/reference/reference.h"
#include "compiler/runtime/module_loader.h"
#include "compiler/runtime/runtime.h"
#include "compiler/support/clock.h"
#include "compiler/support/log.h"
#include "compiler/support/stats.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"
#include "costmodel/xgb_model.h"
#include "db/database.h"
#include "nlohmann/json.hpp"
#include "bench/bench.h"
#include "bench/in_process_runner.h"
#include "cli/flags.h"
#include "tuner/builder.h"
#include "tuner/log_model.h"
#include "tuner/model_eval.h"
#include "tuner/model_policy.h"
#include "tuner/model_store.h"
#include "tuner/runner.h"
#include "tuner/search_policy.h"
#include "tuner/tuning_loop.h"

namespace tuneforge::cli {
namespace {

constexpr const char* kUsage =
    "usage: tuneforge bench search [--suite quick|small|issue|ops|matmul|conv|strided|smoke] [--seeds N] [--trials N]\n"
    "                              [--case TASK] [--plot FILE.svg] [--json]\n"
    "       tuneforge bench search --product [--case TASK] [--seeds N] [--trials N] [--json]\n"
    "                              (real tune jobs; see bench search --product --help)\n"
    "       tuneforge bench search --eval-db FILE [--case TASK] [--splits N] [--simulate S]\n"
    "                              [--bar-rank K] [--variant NAME] [--json]\n"
    "  --suite   quick (default): matmul 256^3 and 128x768x192, 64 trials, 2 seeds\n"
    "              (a few minutes; small shapes of the issue's two cases)\n"
    "            small: matmul 256^3 and 512^3, 128 trials\n"
    "            issue: matmul 1024^3 and 512x3072x768, 512 trials (hours here)\n"
    "            ops: two ResNet-18 conv2d layers (128@28^2, 256@14^2), two BERT\n"
    "              dense layers and the quick matmuls; 64 trials, 5 seeds\n"
    "            matmul: five matmuls of 28-38 MFLOP (the quick ones, 64x1024x256,\n"
    "              256x512x128, 192x192x384); 64 trials, 5 seeds, random 3x: each\n"
    "              case's warm runs start from a log of the four other shapes\n"
    "            conv: the ops suite's two convolutions alone\n"
    "            strided: ResNet-18's two 3x3 stride-2 layers, 64 trials, 5 seeds\n"
    "            smoke: matmul 64^3 and 32x96x48, 32 trials, 2 seeds (seconds)\n"
    "  --model FILE.onnx  the tasks of an ONNX model (tuneforge tune --model's tasks,\n"
    "            e.g. ResNet-18's 12) instead of a suite's cases; 64 trials, 3 seeds,\n"
    "            random 3x the trials\n"
    "            Each case runs random, model, model+transfer (the model first\n"
    "            trained on the records the suite's other cases of the op measured)\n"
    "            and model+log (starting from the log model of those records).\n"
    "            --case takes any task.\n"
    "  --seeds   seeds per policy (default 3; quick and smoke 2)\n"
    "  --trials  budget per run (default: the suite's)\n"
    "  --case    a task instead of the suite's cases, or several separated by ';'\n"
    "            (run as a suite's cases; transfer runs need two of one op)\n"
    "  --plot    write an SVG of best-so-far GFLOP/s vs trials to this file (default: none)\n"
    "  --random-trials N  budget of the random policy's runs (default: --trials; the\n"
    "            ops suite: 3x --trials, so random's trials to 95% are measured, not cut\n"
    "            off at the model's budget, and model at T vs random at 3T can be read)\n"
    "  --reference-trials N  per case, one more random run of N trials (seed 1000)\n"
    "            after the others, for a longer random search behind the best known\n"
    "            (default 0). The best known, the bar of trials to 95%, is the best of\n"
    "            the random runs (every seed, and this one); trials to 95% of the best\n"
    "            any run measured are shown beside it\n"
    "  --retime N  at the end of each case, time up to N distinct configs again (half\n"
    "            the best of random's runs, then the best of any run, each within 15%\n"
    "            of its best) and N/2 probes (random's configs drawn uniformly),\n"
    "            --retime-rounds times each, interleaved; then, second pass, every\n"
    "            other config whose cached number is >= 95% of the new bar\n"
    "            (--retime-reach-line; the reach, best first, at most --retime-reach,\n"
    "            its own level from 8 anchors of the first pass timed again). The\n"
    "            level is the probes' median cached / re-timed; the curves and the\n"
    "            best known use a re-timed config's median times the level instead\n"
    "            of its one measurement, so a lucky sample does not set the bar\n"
    "            (default 32; 0: off, every number from the cache; trials to 95%\n"
    "            from the cached numbers alone are shown beside). When the level is\n"
    "            outside --retime-level-range the machine's speed changed meanwhile:\n"
    "            the re-timing is reported but discarded, the figures stay the cached\n"
    "            numbers\n"
    "  --retime-rounds R  rounds of the re-timing (default 5)\n"
    "  --retime-reach N  at most N configs in the re-timing's second pass, the best\n"
    "            first (default 512; 0: no second pass). retimed.seconds and\n"
    "            retimed.reach_seconds in the JSON give what each pass cost\n"
    "  --retime-reach-line P  the second pass's line: configs whose cached number is\n"
    "            >= P% of the bar after the first pass (default 95, 1-100)\n"
    "  --retime-level-range LO,HI  the first pass's level is kept when within\n"
    "            [LO%, HI%] (default 80,125); outside, both passes are discarded\n"
    "  --retime-reach-range LO,HI  the second pass's level is kept when within\n"
    "            [LO%, HI%] of the first's (default 80,125); outside, both passes are\n"
    "            discarded. Either range: 1 <= LO < HI <= 10000 (a range without 100\n"
    "            discards every re-timing, as a machine whose speed moved would)\n"
    "  --heuristics  every run (every policy) starts, as `tuneforge tune` does, with the\n"
    "            template's heuristic configs, at most a quarter of --trials; the\n"
    "            tuning job's own cold curve (default: off, the policies alone)\n"
    "  --label-rounds R  every new config is measured R times (1-20, default 1), in R\n"
    "            rounds over its batch of 8 in a shuffled order, and its label (the\n"
    "            cached number, what the model learns) is the median of all the rounds'\n"
    "            samples: a slow phase of the machine during one measurement no longer\n"
    "            sets it. R times the measuring time. Configs already in --measurements\n"
    "            keep the label they were stored with\n"
    "  --measurements FILE  a tuning-log db used as the measurement cache across runs:\n"
    "            a config of the case already in it (this target, this template\n"
    "            version) is not measured again, new measurements are added (created\n"
    "            when missing). A rerun with a changed policy measures only its new\n"
    "            configs. Default: none (everything measured in this run)\n"
    "  --variant NAME  the model policy's runs use this variant's options (the\n"
    "            --eval-db list, and search variants such as 'no repair')\n"
    "  --log FILE  a shared tuning log (a tuneforge db, e.g. the team's): each case's\n"
    "            model+transfer and model+log runs start from its records of the case's\n"
    "            op on this target in other shapes (each config's first record, read\n"
    "            before the run measures anything; FILE may be the --measurements file)\n"
    "            instead of the other cases' records of this run, so one case runs warm\n"
    "            alone. A case whose op the log holds in no other shape runs without\n"
    "            them; a missing file, or one that warms no case, is an error\n"
    "  --json    one JSON object on stdout\n"
    "  --eval-db evaluate cost-model variants offline on the records of a tuning-log\n"
    "            file (no kernel is measured): held-out pairwise accuracy and recall@k\n"
    "            per workload, own records, transfer from the op's other shapes, the\n"
    "            log model of the other shapes alone and fine-tuned on own records,\n"
    "            averaged over --splits different 75/25 splits (default 5; 0: only\n"
    "            the scoring speed: lowering, features, predict per candidate);\n"
    "            --simulate S: also the search simulated on each workload's records\n"
    "            (every trial a lookup; seeds 1-S, default 0: off), cold, from the\n"
    "            other shapes' records and warm from their log model: trials to 95%\n"
    "            of the records' best, median and per seed, beside random's mean\n"
    "            (configs + 1) / (configs within 95% + 1);\n"
    "            --bar-rank K: the simulated search's bar is the K-th best config's\n"
    "            throughput instead of the best's (default 1), a bar that K - 1 lucky\n"
    "            measurements of a noisy machine cannot raise;\n"
    "            --variant NAME: only that cost-model variant (e.g. default)\n"
    "Kernels are built and timed in this process (warm-up, then 3 samples of >= 10 ms).\n";

// Holds one model (the log model of a bench case); saves are dropped, so every seed
// starts from the same model.
class OneModelStore : public ModelStore {
 public:
  OneModelStore(std::string key, std::string bytes) : key_(std::move(key)), bytes_(std::move(bytes)) {}
  absl::StatusOr<std::optional<std::string>> Load(const std::string& key) override {
    return key == key_ ? std::optional<std::string>(bytes_) : std::nullopt;
  }
  absl::Status Save(const std::string&, const std::string&) override { return absl::OkStatus(); }

 private:
  std::string key_, bytes_;
};

struct Measured {
  double gflops = 0;  // 0 = failed
  TuningRecord record;
};

// One run: best-so-far GFLOP/s after each trial.
using Curve = std::vector<double>;
// One run: its trials' configs (JSON), in order.
using Trials = std::vector<std::string>;

struct CaseResult {
  std::string task;
  std::map<std::string, std::vector<Curve>> curves;  // policy -> one curve per seed
  nlohmann::json model_eval;
  // The bar of "trials to 95%": the best of the random policy's runs (every seed) and of
  // the reference run, as the issue defines it ("the best of a long random run"). Those
  // configs are fixed by their seeds and, through --measurements, so are their numbers:
  // the bar does not move when a changed policy measures new configs. (The best any run
  // measured is the max over more and more noisy samples of near-equal configs, and rose
  // with every run: it is kept as best_measured, with trials to 95% of it beside.)
  double best_known = 0;
  int best_known_trials = 0;  // random trials behind best_known (seeds x budget + reference)
  double best_measured = 0;  // the best any run of any policy measured
  // The bar before re-timing: the best cached number of the random runs.
  double best_known_cached = 0;
  // Re-timing (--retime): the configs timed again, interleaved, at the end of the case.
  nlohmann::json retimed = nlohmann::json::object();
  // Per policy, per seed: the curve from the cached numbers alone (no re-timing).
  std::map<std::string, std::vector<Curve>> cached_curves;
  // The extra long random run (--reference-trials; 0: none).
  int reference_trials = 0;
  double reference_best = 0;
  std::string log_model_note;  // why model+log did not run, if it did not
  int log_model_max_depth = 0;  // the depth of the model+log runs' log model's trees
  int transfer_records = 0;  // records of other shapes the model+transfer runs started from
  int stored_measurements = 0;  // configs of the case in the --measurements db at start
};

// First trial (1-based) at which the curve reaches `target`, or 0 if never.
int TrialsToReach(const Curve& c, double target) {
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i] >= target) return static_cast<int>(i) + 1;
  return 0;
}

// Median over the runs of the best-so-far after `t` trials (a shorter run: its end).
double MedianAt(const std::vector<Curve>& curves, int64_t t) {
  std::vector<double> v;
  for (const Curve& cv : curves)
    if (!cv.empty()) v.push_back(cv[std::min<size_t>(t, cv.size()) - 1]);
  return MedianOr(v, 0);
}

nlohmann::json ScoringJson(const ScoringSpeed& s) {
  return {{"candidates", s.candidates},
          {"lower_us_per_candidate", s.lower_us},
          {"extract_us_per_candidate", s.extract_us},
          {"predict_us_per_candidate", s.predict_us},
          {"score_candidates_per_second", s.score_candidates_per_second},
          {"score_cpu_us_per_candidate", s.score_cpu_us},
          {"scoring_threads", s.scoring_threads}};
}

void PrintScoring(const ScoringSpeed& s) {
  std::printf(
      "  scoring %d fresh candidates: lower %.1f us + features %.1f us + predict %.1f us per "
      "candidate (CPU time, 1 thread);\n  CostModel::Predict %.0f candidates/s on %d threads (%.1f us CPU "
      "per candidate)\n",
      s.candidates, s.lower_us, s.extract_us, s.predict_us, s.score_candidates_per_second,
      s.scoring_threads, s.score_cpu_us);
}

struct Variant {
  std::string name;
  ModelPolicyOptions options;
  bool search_only = false;  // only search options changed: --eval-db skips it unless named
  // The depth of its log model's trees on every space: a variant that sets the trees'
  // depth sets its log model's too; unset, the log model has the depth `db
  // train-model` gives it (LogModelDepth: by the space).
  std::optional<int> log_max_depth;
  std::optional<int> log_max_records;  // LogModelOptions::max_records
};

// The cost-model variants compared offline; the first is the default the tuner uses.
std::vector<Variant> EvalVariants() {
  std::vector<Variant> v;
  auto add = [&](const std::string& name, auto&& edit) {
    ModelPolicyOptions o;
    edit(o);
    Variant variant{name, o, false, std::nullopt, std::nullopt};
    if (o.cost_model.xgb.max_depth != costmodel::XgbParams{}.max_depth) variant.log_max_depth = o.cost_model.xgb.max_depth;
    v.push_back(std::move(variant));
  };
  add("default", [](ModelPolicyOptions&) {});
  add("pairwise pairs=1", [](ModelPolicyOptions& o) { o.cost_model.xgb.num_pairsample = 1; });
  add("pairwise pairs=32", [](ModelPolicyOptions& o) { o.cost_model.xgb.num_pairsample = 32; });
  add("pairwise 200r eta.1", [](ModelPolicyOptions& o) {
    o.cost_model.xgb.rounds = 200;
    o.cost_model.xgb.eta = 0.1;
  });
  add("pairwise pairs=8 200r", [](ModelPolicyOptions& o) {
    o.cost_model.xgb.num_pairsample = 8;
    o.cost_model.xgb.rounds = 200;
    o.cost_model.xgb.eta = 0.1;
  });
  add("pairwise p8 200r mcw4", [](ModelPolicyOptions& o) {
    o.cost_model.xgb.num_pairsample = 8;
    o.cost_model.xgb.rounds = 200;
    o.cost_model.xgb.eta = 0.1;
    o.cost_model.xgb.min_child_weight = 4;
  });
  add("rich features", [](ModelPolicyOptions& o) { o.cost_model.features.rich = true; });
  add("rich features depth8", [](ModelPolicyOptions& o) {
    o.cost_model.features.rich = true;
    o.cost_model.xgb.max_depth = 8;
  });
  add("log model depth6", [](ModelPolicyOptions&) {});
  v.back().log_max_depth = 6;
  add("log model depth8", [](ModelPolicyOptions&) {});
  v.back().log_max_depth = 8;
  add("log model newest 3000", [](ModelPolicyOptions&) {});
  v.back().log_max_records = 3000;
  add("transfer 20000", [](ModelPolicyOptions& o) { o.cost_model.max_transfer_records = 20000; });
  add("no register tile", [](ModelPolicyOptions& o) { o.cost_model.features.register_tile = false; });
  add("no knob features", [](ModelPolicyOptions& o) { o.cost_model.features.knobs = costmodel::KnobFeatures::kNone; });
  add("all knob features", [](ModelPolicyOptions& o) { o.cost_model.features.knobs = costmodel::KnobFeatures::kAll; });
  add("pairwise depth4", [](ModelPolicyOptions& o) { o.cost_model.xgb.max_depth = 4; });
  add("pairwise depth8", [](ModelPolicyOptions& o) { o.cost_model.xgb.max_depth = 8; });
  add("pairwise sub.8 col.8", [](ModelPolicyOptions& o) {
    o.cost_model.xgb.subsample = 0.8;
    o.cost_model.xgb.colsample_bytree = 0.8;
  });
  add("reg normalized", [](ModelPolicyOptions& o) { o.cost_model.xgb.objective = "reg:squarederror"; });
  // Search variants (same model, another search), for bench search --variant.
  auto search = [&](const std::string& name, auto&& edit) {
    add(name, edit);
    v.back().search_only = true;
  };
  search("log model alone", [](ModelPolicyOptions& o) { o.cost_model.transfer_with_log_model = false; });
  search("no repair", [](ModelPolicyOptions& o) { o.repair_tries = 0; });
  search("repair16", [](ModelPolicyOptions& o) { o.repair_tries = 16; });
  search("chains128 steps48", [](ModelPolicyOptions& o) {
    o.chains = 128;
    o.steps = 48;
  });
  search("min records 16", [](ModelPolicyOptions& o) { o.cost_model.min_records = 16; });
  search("batches of 8", [](ModelPolicyOptions& o) {  // the default before session 40
    o.early_batch = 0;
    o.cost_model.min_records = 8;
  });
  search("early batch 4", [](ModelPolicyOptions& o) { o.early_batch = 4; });
  search("early batch 1", [](ModelPolicyOptions& o) { o.early_batch = 1; });
  search("early batch min2", [](ModelPolicyOptions& o) { o.cost_model.min_records = 2; });
  search("early batch rows64", [](ModelPolicyOptions& o) { o.early_batch_rows = 64; });
  search("prior pool 8 margin.5", [](ModelPolicyOptions& o) { o.cost_model.hardware_prior_weight = 0.5; });
  search("prior pool 8 margin", [](ModelPolicyOptions& o) { o.cost_model.hardware_prior_weight = 1; });
  search("prior pool 8 margin4", [](ModelPolicyOptions& o) { o.cost_model.hardware_prior_weight = 4; });
  search("prior pool 32", [](ModelPolicyOptions& o) { o.prior_pool = 32; });
  search("no hardware prior", [](ModelPolicyOptions& o) {  // the default before session 42
    o.prior_pool = 0;
    o.cost_model.hardware_prior_weight = 0;
  });
  search("prior pool only", [](ModelPolicyOptions& o) { o.cost_model.hardware_prior_weight = 0; });
  search("prior margin only", [](ModelPolicyOptions& o) { o.prior_pool = 0; });
  search("no structural quota", [](ModelPolicyOptions& o) { o.structural_quota = 0; });
  search("structural quota 8", [](ModelPolicyOptions& o) { o.structural_quota = 8; });
  search("no incumbent probes", [](ModelPolicyOptions& o) { o.incumbent_probes = 0; });
  search("incumbent probes 2", [](ModelPolicyOptions& o) { o.incumbent_probes = 2; });
  search("probe quota 2", [](ModelPolicyOptions& o) { o.probe_quota = 2; });
  search("probe quota 8", [](ModelPolicyOptions& o) { o.probe_quota = 8; });
  return v;
}

absl::StatusOr<Variant> FindVariant(const std::string& name) {
  std::vector<std::string> names;
  for (Variant& v : EvalVariants()) {
    if (v.name == name) return std::move(v);
    names.push_back(v.name);
  }
  return absl::InvalidArgumentError("unknown --variant '" + name + "' (" + absl::StrJoin(names, ", ") + ")");
}

// The options of the log model a variant's model+log runs start from: the variant's
// trees and features (a log model of other features than the policy's would
// not load), its depth forced where the variant says so.
LogModelOptions LogOptionsFor(const Variant& v) {
  LogModelOptions lo;
  lo.xgb = v.options.cost_model.xgb;
  if (v.log_max_depth) lo.xgb.max_depth = lo.knob_features_max_depth = *v.log_max_depth;
  if (v.log_max_records) lo.max_records = *v.log_max_records;
  lo.features = v.options.cost_model.features;
  return lo;
}

class SearchBench {
 public:
  SearchBench(TuningTask task, Target target, int trials, int random_trials, int seeds, bool quiet,
              int reference_trials = 0, Database* measurements = nullptr,
              ModelPolicyOptions model_options = {}, LogModelOptions log_options = {})
      : task_(std::move(task)),
        target_(std::move(target)),
        trials_(trials),
        random_trials_(random_trials),
        seeds_(seeds),
        reference_trials_(reference_trials),
        quiet_(quiet),
        measurements_(measurements),
        model_options_(std::move(model_options)),
        log_options_(std::move(log_options)),
        builder_(2) {}

  // Phase 1: random and model search, `seeds` runs each.
  absl::Status Run() {
    ASSIGN_OR_RETURN(tmpl_, FindTemplate(task_));
    runner_ = std::make_unique<InProcessRunner>(task_, 1);
    RETURN_IF_ERROR(runner_->Prepare(*tmpl_, target_));
    result_.task = task_.CanonicalText();
    if (measurements_) {
      ASSIGN_OR_RETURN(std::vector<TuningRecord> stored,
                       measurements_->Records(task_.WorkloadKey(), target_.Key()));
      for (TuningRecord& r : stored)
        if (r.template_name == tmpl_->name() && r.template_version == tmpl_->version())
          stored_.emplace(r.config_json, std::move(r));  // the first record of a config
      result_.stored_measurements = static_cast<int>(stored_.size());
    }
    for (int seed = 1; seed <= seeds_; ++seed) {
      ASSIGN_OR_RETURN(Trials r, RunPolicy("random", seed, {}, nullptr, random_trials_));
      runs_["random"].push_back(std::move(r));
      ASSIGN_OR_RETURN(Trials m, RunPolicy("model", seed, {}));
      runs_["model"].push_back(std::move(m));
    }
    return absl::OkStatus();
  }

  // Phase 2 (transfer learning): the model policy again, with the same seeds, but
  // starting from what `others` (records of other shapes of the op) teach: trained on
  // them in each job (model+transfer), and the log model pre-trained on them, as
  // `db train-model` builds it from a shared log without this shape (model+log; the
  // job's model is fine-tuned on them as well, as a tuning job loads them from the db,
  // unless CostModelOptions::transfer_with_log_model is off).
  absl::Status RunTransfer(const std::vector<TuningRecord>& others) {
    if (others.empty()) return absl::OkStatus();
    for (int seed = 1; seed <= seeds_; ++seed) {
      ASSIGN_OR_RETURN(Trials c, RunPolicy("model", seed, others, nullptr));
      runs_["model+transfer"].push_back(std::move(c));
    }
    result_.transfer_records = static_cast<int>(others.size());
    LogModelInfo info;
    absl::StatusOr<std::string> bytes = TrainLogModel(*tmpl_, target_, others, log_options_, &info);
    if (!bytes.ok()) {  // too few records of the other shapes (a tiny budget)
      result_.log_model_note = std::string(bytes.status().message());
      return absl::OkStatus();
    }
    result_.log_model_max_depth = info.max_depth;
    OneModelStore store(info.key, *bytes);
    for (int seed = 1; seed <= seeds_; ++seed) {
      ASSIGN_OR_RETURN(Trials c, RunPolicy("model", seed, others, &store));
      runs_["model+log"].push_back(std::move(c));
    }
    return absl::OkStatus();
  }

  // Every distinct config measured for this case, as records.
  std::vector<TuningRecord> Records() const {
    std::vector<TuningRecord> out;
    for (const auto& [k, m] : cache_) out.push_back(m.record);
    return out;
  }

  // The cost model's evaluation on what the policies measured, then the reference:
  // a long random run (its own seed, after the transfer phases, so it adds nothing to
  // what they learn from), then the re-timing of the best configs (SetRetime), and
  // the curves and the best known from the numbers that gives.
  absl::StatusOr<CaseResult> Finish() {
    result_.model_eval = EvaluateModel();
    Trials reference;
    if (reference_trials_ > 0) {
      ASSIGN_OR_RETURN(reference, RunPolicy("random", 1000, {}, nullptr, reference_trials_));
    }
    std::map<std::string, double> value;  // config -> GFLOP/s of the curves
    for (const auto& [key, m] : cache_) value[key] = m.gflops;
    auto curves_of = [&](const std::map<std::string, double>& numbers) {
      std::map<std::string, std::vector<Curve>> out;
      for (const auto& [policy, runs] : runs_)
        for (const Trials& t : runs) out[policy].push_back(CurveOf(t, numbers));
      return out;
    };
    result_.cached_curves = curves_of(value);
    const Curve reference_cached = CurveOf(reference, value);
    if (retime_configs_ > 0) RETURN_IF_ERROR(Retime(reference, &value));
    result_.curves = curves_of(value);
    const Curve reference_curve = CurveOf(reference, value);
    result_.reference_trials = static_cast<int>(reference_curve.size());
    result_.reference_best = reference_curve.empty() ? 0 : reference_curve.back();
    result_.best_known = result_.reference_best;
    result_.best_known_trials = result_.reference_trials;
    result_.best_known_cached = reference_cached.empty() ? 0 : reference_cached.back();
    for (const Curve& c : result_.curves["random"]) {
      if (c.empty()) continue;
      result_.best_known = std::max(result_.best_known, c.back());
      result_.best_known_trials += static_cast<int>(c.size());
    }
    for (const Curve& c : result_.cached_curves["random"])
      if (!c.empty()) result_.best_known_cached = std::max(result_.best_known_cached, c.back());
    result_.best_measured = result_.best_known;
    for (const auto& [p, curves] : result_.curves)
      for (const Curve& c : curves)
        if (!c.empty()) result_.best_measured = std::max(result_.best_measured, c.back());
    return result_;
  }

  // Re-timing at the end of a case: up to `configs` distinct configs - the best of
  // the random runs and the best of every run, by their cached numbers, within 15% of
  // the best of each - are timed `rounds` times more, interleaved in a shuffled order
  // each round, with configs/2 probes that set the level (Retime), then every other
  // config within `reach_line_percent` of the new bar (the reach, at most `reach`
  // configs, best first); the curves use the median of those rounds instead of their
  // one cached measurement. configs 0: off.
  // A level outside `level_range` (pass 1's) or a reach level outside `reach_range`
  // times pass 1's discards the re-timing.
  void SetRetime(int configs, int rounds, int reach, int reach_line_percent,
                 std::pair<double, double> level_range, std::pair<double, double> reach_range) {
    retime_configs_ = configs;
    retime_rounds_ = rounds;
    retime_reach_ = reach;
    reach_line_ = reach_line_percent / 100.0;
    level_range_ = level_range;
    reach_range_ = reach_range;
  }

  // Every new config's label is pooled from this many interleaved measurements
  // (--label-rounds; MeasureLabels).
  void SetLabelRounds(int rounds) { label_rounds_ = rounds; }

  // Every run starts with the template's heuristic configs, as a tuning job does
  // (--heuristics).
  void SetHeuristics(bool on) { heuristics_ = on; }

 private:
  PolicyContext Context(uint64_t seed, ModelStore* store = nullptr) const {
    return PolicyContext{task_, target_, tmpl_, seed, store, {}};
  }

  absl::StatusOr<Trials> RunPolicy(const std::string& name, uint64_t seed,
                                  const std::vector<TuningRecord>& others, ModelStore* store = nullptr,
                                  int trials = 0) {
    if (trials <= 0) trials = trials_;
    std::unique_ptr<SearchPolicy> policy;
    if (name == "model") {
      policy = std::make_unique<ModelPolicy>(Context(seed, store), model_options_);
    } else {
      ASSIGN_OR_RETURN(policy, MakeSearchPolicy(name, Context(seed, store)));
    }
    if (!others.empty()) policy->ObserveOtherTasks(others);
    Trials trials_run;
    double best = 0;
    auto start = std::chrono::steady_clock::now();
    auto trial_batch = [&](const std::vector<Config>& configs) -> absl::Status {
      ASSIGN_OR_RETURN(std::vector<TuningRecord> records, MeasureConfigs(configs, runner_.get()));
      for (const TuningRecord& r : records) {
        best = std::max(best, cache_[r.config_json].gflops);
        trials_run.push_back(r.config_json);
      }
      policy->Observe(records);
      return absl::OkStatus();
    };
    // As `tuneforge tune` starts: the template's heuristic configs first, at most a
    // quarter of the model's budget (the same for every policy, random's longer runs
    // included), in batches, observed by the policy.
    if (heuristics_) {
      const std::vector<Config> warm = HeuristicConfigs(
          *tmpl_, task_, target_, *SpaceOf(*tmpl_, task_, target_),
          std::min<size_t>(static_cast<size_t>(std::max(1, trials_ / 4)), trials));
      for (size_t begin = 0; begin < warm.size(); begin += 8) {
        const size_t end = std::min(warm.size(), begin + 8);
        RETURN_IF_ERROR(trial_batch({warm.begin() + begin, warm.begin() + end}));
      }
    }
    while (static_cast<int>(trials_run.size()) < trials) {
      int n = std::min(8, trials - static_cast<int>(trials_run.size()));
      std::vector<Config> configs = policy->Propose(n);
      if (configs.empty()) break;
      RETURN_IF_ERROR(trial_batch(configs));
    }
    if (!quiet_)
      std::fprintf(stderr, "  %-14s seed %llu: best %.1f GFLOP/s after %zu trials (%.0f s)\n",
                   (store ? name + "+log" : others.empty() ? name : name + "+transfer").c_str(),
                   static_cast<unsigned long long>(seed), best, trials_run.size(),
                   SecondsSince(start));
    return trials_run;
  }

  // Best-so-far curve of a run's trials under `numbers` (config -> GFLOP/s).
  static Curve CurveOf(const Trials& trials, const std::map<std::string, double>& numbers) {
    Curve curve;
    double best = 0;
    for (const std::string& key : trials) {
      auto it = numbers.find(key);
      best = std::max(best, it == numbers.end() ? 0.0 : it->second);
      curve.push_back(best);
    }
    return curve;
  }

  // See SetRetime. A re-timed config's number is the median of its rounds times the
  // level: the median, over the probes (random's configs drawn uniformly), of cached /
  // re-timed. The level puts the re-timed numbers on the scale of the cached ones (a
  // measurement file's numbers drift by a few percent over hours), so a re-timed
  // config and one that was not compare as before; what changes is that the best
  // configs, whose single cached numbers are the luckiest of many, are judged by
  // `rounds` fresh medians (the winner's curse of a bar at the max of many noisy
  // numbers, docs/search.md "The bar re-timed").
  absl::Status Retime(const Trials& reference, std::map<std::string, double>* value) {
    std::set<std::string> from_random(reference.begin(), reference.end());
    for (const Trials& t : runs_["random"]) from_random.insert(t.begin(), t.end());
    // Within 15% of the best: random's configs (the bar) and every run's (the reach),
    // best first; random's take the first half of the slots, the rest go to the best
    // of either that are not in yet.
    auto top = [&](bool random_only) {
      std::vector<std::pair<double, std::string>> ranked;
      for (const auto& [key, m] : cache_)
        if (m.gflops > 0 && (!random_only || from_random.count(key)))
          ranked.emplace_back(m.gflops, key);
      std::sort(ranked.rbegin(), ranked.rend());
      std::vector<std::string> out;
      for (const auto& [gflops, key] : ranked)
        if (gflops >= 0.85 * ranked[0].first) out.push_back(key);
      return out;
    };
    const std::vector<std::string> random_top = top(true), any_top = top(false);
    std::vector<std::string> keys;
    auto add = [&](const std::vector<std::string>& from, size_t limit) {
      for (const std::string& key : from)
        if (keys.size() < limit && std::find(keys.begin(), keys.end(), key) == keys.end())
          keys.push_back(key);
    };
    const size_t slots = static_cast<size_t>(retime_configs_);
    add(random_top, (slots + 1) / 2);
    add(any_top, slots);
    add(random_top, slots);
    const size_t top_count = keys.size();
    // The level's probes: half as many more of random's configs, drawn uniformly, not
    // by their numbers. The top configs' own cached / re-timed ratio is biased: each
    // was picked for a high number, so their single measurements are the luckiest of
    // many (their median ratio is the winner's curse, reported as `top_level`); a
    // uniform draw's ratio is the machine's drift alone.
    {
      std::vector<std::string> pool;
      for (const std::string& key : from_random)
        if (cache_.count(key) && cache_.at(key).gflops > 0 &&
            std::find(keys.begin(), keys.end(), key) == keys.end())
          pool.push_back(key);
      std::mt19937_64 draw(23);
      std::shuffle(pool.begin(), pool.end(), draw);
      pool.resize(std::min(pool.size(), (slots + 1) / 2));
      keys.insert(keys.end(), pool.begin(), pool.end());
    }
    if (keys.empty()) return absl::OkStatus();
    const auto pass1_start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(std::vector<std::vector<double>> samples, TimeRounds(keys, 17));
    const double pass1_seconds = SecondsSince(pass1_start);
    // keys[i]: the first top_count the top configs, the rest the probes.
    std::vector<double> ratios_probe, ratios_random, ratios_any;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (samples[i].empty()) continue;
      const std::string& key = keys[i];
      const double ratio = cache_.at(key).gflops / Median(samples[i]);
      if (i >= top_count) {
        ratios_probe.push_back(ratio);
        continue;
      }
      ratios_any.push_back(ratio);
      if (from_random.count(key)) ratios_random.push_back(ratio);
    }
    // From the probes when at least 3 were timed; else (a run of few configs) from
    // the top configs as before: random's, else any run's.
    constexpr size_t kMinProbes = 3;
    const char* level_from = ratios_probe.size() >= kMinProbes ? "probes"
                             : !ratios_random.empty()          ? "random"
                                                               : "any";
    const double top_level = MedianOr(ratios_random.empty() ? ratios_any : ratios_random, 1.0);
    const double level = ratios_probe.size() >= kMinProbes ? MedianOr(ratios_probe, 1.0) : top_level;
    // How far a label is from its config's re-timed median once the drift is taken
    // out: per probe (drawn uniformly, so not picked for a lucky number), |ratio /
    // level - 1| on a log scale; the median and 90th percentile over the probes. What
    // --label-rounds is meant to lower.
    nlohmann::json label_disagreement;
    if (ratios_probe.size() >= kMinProbes) {
      std::vector<double> off;
      for (double r : ratios_probe) off.push_back(std::exp(std::fabs(std::log(r / level))) - 1);
      std::sort(off.begin(), off.end());
      label_disagreement = {{"median", Median(off)},
                            {"p90", off[std::min(off.size() - 1, static_cast<size_t>(0.9 * off.size()))]},
                            {"probes", off.size()}};
    }
    // The level corrects a slow drift of a few percent. Far from 1, the machine ran at
    // another speed during the rounds than during the runs (a VM's slow phase: rounds
    // at 1/9 of the cached numbers, now and then at 2/3), the rounds are not on the
    // cached scale and scaling them up makes figures above the machine's peak: the
    // curves keep the cached numbers.
    std::string discarded;
    if (level < level_range_.first || level > level_range_.second) {
      char why[160];
      std::snprintf(why, sizeof(why),
                    "level %.2f outside [%.2f, %.2f]: the machine's speed changed; cached numbers kept",
                    level, level_range_.first, level_range_.second);
      discarded = why;  // the report prints it under the case
    }
    // One re-timed config's entry, its value the median of its rounds on `on_level`.
    // The values go into the curves at the end, unless the re-timing is discarded.
    nlohmann::json entries = nlohmann::json::array();
    std::map<std::string, double> retimed;  // config -> value
    auto add_entry = [&](const std::string& key, const std::vector<double>& rounds, bool probe,
                         int pass, double on_level) {
      nlohmann::json e = {{"config", key},
                          {"cached_gflops", cache_.at(key).gflops},
                          {"random", from_random.count(key) > 0},
                          {"probe", probe},
                          {"pass", pass},
                          {"samples", rounds}};
      if (!rounds.empty()) {
        const double m = Median(rounds);
        e["retimed_gflops"] = m;
        retimed[key] = m * on_level;
        e["value_gflops"] = m * on_level;
      }
      entries.push_back(std::move(e));
    };
    for (size_t i = 0; i < keys.size(); ++i) add_entry(keys[i], samples[i], i >= top_count, 1, level);
    // Pass 2, the reach: the top's re-timed medians are mostly below their cached
    // numbers (the winner's curse), so configs that were not in the top N but whose
    // cached numbers are above 95% of the new bar would reach it on their one lucky
    // measurement alone. Those (any run's, best first, at most retime_reach_) are timed
    // the same way. One pass: a config pass 2 lifts above the bar does not bring in a
    // third.
    // Pass 2 runs a minute or two after pass 1, and on a VM a fast kernel's speed
    // changes by 20-35% between minutes, which the probes (mostly slow kernels) do not
    // show. So pass 2 also times anchors - the first kAnchors of pass 1's top configs,
    // fast kernels like the reach's (a small top is filled up with the probes) - in the
    // same rounds, and puts its medians on pass 1's scale: reach_level = median over
    // the anchors of pass-1 value / pass-2 median
    // (pass 1's level when fewer than kMinProbes anchors were timed). A reach_level
    // outside reach_range_ x level discards both passes: pass 1's lowered
    // values next to the reach's lucky cached numbers would be the bias the reach is
    // there to remove, so the curves keep the cached numbers throughout.
    constexpr size_t kAnchors = 8;
    size_t reach_count = 0, reach_wanted = 0;  // timed; above the line (before the cap)
    double bar = 0;  // random's best after pass 1, as Finish computes it
    double reach_seconds = 0, reach_level = level;
    std::string reach_level_from = "pass 1", reach_discarded;
    nlohmann::json anchors_json = nlohmann::json::array();
    if (discarded.empty()) {
      for (const std::string& key : from_random) {
        if (auto it = retimed.find(key); it != retimed.end()) {
          bar = std::max(bar, it->second);
        } else if (auto v = value->find(key); v != value->end()) {
          bar = std::max(bar, v->second);
        }
      }
      const std::set<std::string> timed(keys.begin(), keys.end());
      std::vector<std::pair<double, std::string>> above;
      for (const auto& [key, m] : cache_)
        if (m.gflops >= reach_line_ * bar && !timed.count(key)) above.emplace_back(m.gflops, key);
      std::sort(above.rbegin(), above.rend());
      reach_wanted = above.size();
      above.resize(std::min(above.size(), static_cast<size_t>(retime_reach_)));
      std::vector<std::string> reach;
      for (const auto& [gflops, key] : above) reach.push_back(key);
      reach_count = reach.size();
      if (!reach.empty()) {
        // The anchors in pass 1's order (the top, best cached first, then the probes
        // when the top has fewer than kAnchors), not by their pass-1 values: picked by
        // those, they would be pass 1's luckiest medians and their ratio the winner's
        // curse again.
        std::vector<std::pair<double, std::string>> best_top;
        for (size_t i = 0; i < keys.size() && best_top.size() < kAnchors; ++i)
          if (!samples[i].empty()) best_top.emplace_back(retimed.at(keys[i]), keys[i]);
        std::vector<std::string> to_time = reach;
        for (const auto& [v, key] : best_top) to_time.push_back(key);
        const auto reach_start = std::chrono::steady_clock::now();
        ASSIGN_OR_RETURN(std::vector<std::vector<double>> reach_samples, TimeRounds(to_time, 19));
        reach_seconds = SecondsSince(reach_start);
        std::vector<double> anchor_ratios;
        for (size_t j = 0; j < best_top.size(); ++j) {
          const std::vector<double>& rounds = reach_samples[reach.size() + j];
          nlohmann::json a = {{"config", best_top[j].second},
                              {"pass1_gflops", best_top[j].first},
                              {"samples", rounds}};
          if (!rounds.empty()) anchor_ratios.push_back(best_top[j].first / Median(rounds));
          anchors_json.push_back(std::move(a));
        }
        if (anchor_ratios.size() >= kMinProbes) {
          reach_level = Median(anchor_ratios);
          reach_level_from = "anchors";
        }
        if (reach_level < reach_range_.first * level || reach_level > reach_range_.second * level) {
          char why[200];
          std::snprintf(why, sizeof(why),
                        "reach level %.2f outside [%.2f, %.2f] x pass 1's %.2f: the machine's "
                        "speed changed between the passes; cached numbers kept",
                        reach_level, reach_range_.first, reach_range_.second, level);
          reach_discarded = why;
        }
        for (size_t i = 0; i < reach.size(); ++i)
          add_entry(reach[i], reach_samples[i], false, 2, reach_level);
        if (!reach_discarded.empty()) discarded = reach_discarded;
      }
    }
    if (discarded.empty()) {
      for (const auto& [key, v] : retimed) (*value)[key] = v;
    } else {
      for (nlohmann::json& e : entries) e.erase("value_gflops");
    }
    result_.retimed = {{"configs", top_count},
                       {"reach", reach_count},
                       {"reach_bar", bar},
                       {"reach_line", reach_line_},
                       {"reach_wanted", reach_wanted},
                       {"reach_cap", retime_reach_},
                       {"reach_level", reach_level},
                       {"reach_level_from", reach_level_from},
                       {"anchors", std::move(anchors_json)},
                       {"seconds", pass1_seconds},
                       {"reach_seconds", reach_seconds},
                       {"probes", keys.size() - top_count},
                       {"rounds", retime_rounds_},
                       {"level", level},
                       {"level_from", level_from},
                       {"level_range", {level_range_.first, level_range_.second}},
                       {"reach_range", {reach_range_.first, reach_range_.second}},
                       {"top_level", top_level},
                       {"label_disagreement", std::move(label_disagreement)},
                       {"entries", std::move(entries)}};
    if (!discarded.empty()) result_.retimed["discarded"] = discarded;
    if (!reach_discarded.empty()) result_.retimed["reach_discarded"] = reach_discarded;
    return absl::OkStatus();
  }

  // Builds `keys` and times each `retime_rounds_` times, every round in a fresh
  // shuffled order (seeded by `seed`): per key, the GFLOP/s of its rounds (empty if it
  // failed to build or run).
  absl::StatusOr<std::vector<std::vector<double>>> TimeRounds(const std::vector<std::string>& keys,
                                                              uint64_t seed) {
    std::vector<Candidate> candidates;
    for (const std::string& key : keys) {
      ASSIGN_OR_RETURN(Config c, Config::FromJson(key));
      candidates.push_back(Candidate{std::move(c), false});
    }
    std::vector<BuildResult> built = builder_.Build(task_, *tmpl_, target_, candidates);
    std::vector<std::vector<double>> samples(built.size());
    std::vector<size_t> order(built.size());
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(seed);
    MeasureOptions options;
    options.min_repeat_ms = 10;
    for (int round = 0; round < retime_rounds_; ++round) {
      std::shuffle(order.begin(), order.end(), rng);
      for (size_t i : order) {
        if (built[i].error != MeasureErrorKind::kNone) continue;
        MeasureResult m = runner_->Measure({MeasureInput{task_.CanonicalText(),
                                                         built[i].candidate.config.ToJson(),
                                                         built[i].artifact, nullptr, options}})[0];
        if (m.error == MeasureErrorKind::kNone) samples[i].push_back(Gflops(m));
      }
    }
    return samples;
  }

  double Gflops(const MeasureResult& m) const {
    return m.error == MeasureErrorKind::kNone ? task_.Flops() / m.MedianCost() / 1e9 : 0;
  }

  absl::StatusOr<std::vector<TuningRecord>> MeasureConfigs(const std::vector<Config>& configs,
                                                           Runner* runner) {
    std::vector<Candidate> to_build;
    for (const Config& c : configs) {
      const std::string key = c.ToJson();
      if (cache_.count(key)) continue;
      auto stored = stored_.find(key);
      if (stored != stored_.end()) {
        cache_[key] = Measured{Gflops(stored->second.result), stored->second};
        continue;
      }
      to_build.push_back(Candidate{c, false});
    }
    if (!to_build.empty()) {
      std::vector<TuningRecord> fresh;
      std::vector<BuildResult> built = builder_.Build(task_, *tmpl_, target_, to_build);
      std::vector<MeasureResult> measured = MeasureLabels(built, runner);
      for (size_t i = 0; i < built.size(); ++i) {
        const BuildResult& b = built[i];
        const MeasureResult& m = measured[i];
        TuningRecord r;
        r.workload = WorkloadInfo{task_.WorkloadKey(), task_.op(), task_.CanonicalText(),
                                  task_.ToJson(), task_.Flops()};
        r.target = MakeTargetInfo(target_);
        r.template_name = tmpl_->name();
        r.template_version = tmpl_->version();
        r.config_json = b.candidate.config.ToJson();
        r.result = m;
        cache_[r.config_json] = Measured{Gflops(m), r};
        fresh.push_back(r);
      }
      if (measurements_) RETURN_IF_ERROR(measurements_->Insert(fresh).status());
    }
    std::vector<TuningRecord> out;
    for (const Config& c : configs) out.push_back(cache_.at(c.ToJson()).record);
    return out;
  }

  // The labels of a batch's new configs: one measurement each, or with label rounds
  // R > 1, R measurements each in R rounds, the batch in a shuffled order every round
  // (so other configs run between two measurements of one config), pooled into one
  // result: its samples are all the rounds' samples (the record's cost is their
  // median), its times span the rounds. A config that fails in any round keeps that
  // round's error. Build failures are passed on as they are.
  std::vector<MeasureResult> MeasureLabels(const std::vector<BuildResult>& built, Runner* runner) {
    std::vector<MeasureResult> out(built.size());
    std::vector<size_t> order;
    for (size_t i = 0; i < built.size(); ++i) {
      if (built[i].error == MeasureErrorKind::kNone) {
        order.push_back(i);
      } else {
        out[i].error = built[i].error;
        out[i].error_message = built[i].error_message;
      }
    }
    MeasureOptions options;
    options.min_repeat_ms = 10;
    std::mt19937_64 rng(cache_.size());  // reproducible order, a new one per batch
    for (int round = 0; round < label_rounds_; ++round) {
      if (round > 0) std::shuffle(order.begin(), order.end(), rng);
      for (size_t i : order) {
        if (out[i].error != MeasureErrorKind::kNone) continue;  // failed in an earlier round
        MeasureResult m = runner->Measure({MeasureInput{task_.CanonicalText(),
                                                        built[i].candidate.config.ToJson(),
                                                        built[i].artifact, nullptr, options}})[0];
        if (round == 0 || m.error != MeasureErrorKind::kNone) {
          out[i] = std::move(m);
          continue;
        }
        out[i].costs.insert(out[i].costs.end(), m.costs.begin(), m.costs.end());
        out[i].end_unix_us = m.end_unix_us;
      }
    }
    return out;
  }

  // Held-out evaluation of the cost model on every distinct config measured for this
  // case (75% train, 25% test, split by config hash), both objectives, and where
  // scoring time goes.
  nlohmann::json EvaluateModel() {
    std::vector<TuningRecord> all = Records();
    nlohmann::json out = {{"records", all.size()}};
    for (const char* objective : {"rank:pairwise", "reg:squarederror"}) {
      ModelPolicyOptions o;
      o.cost_model.xgb.objective = objective;
      absl::StatusOr<HeldOutResult> r = EvaluateHeldOut(Context(1), o, all, {});
      if (!r.ok()) {
        out[objective] = {{"error", std::string(r.status().message())}};
        continue;
      }
      out["train"] = r->train;
      out["test"] = r->test;
      out[objective] = {{"pairwise_accuracy", r->pairwise_accuracy},
                        {"recall_at_k", r->recall_at_k},
                        {"k", r->k},
                        {"train_seconds", r->train_seconds}};
    }
    absl::StatusOr<ScoringSpeed> speed = MeasureScoringSpeed(Context(2), ModelPolicyOptions{}, all);
    if (speed.ok()) out["scoring"] = ScoringJson(*speed);
    return out;
  }

  TuningTask task_;
  Target target_;
  int trials_, random_trials_, seeds_, reference_trials_;
  bool quiet_;
  Database* measurements_;  // the --measurements db, or null
  ModelPolicyOptions model_options_;  // of the model policy's runs (--variant)
  LogModelOptions log_options_;       // of the model+log runs' log model (--variant)
  Builder builder_;
  const Template* tmpl_ = nullptr;
  std::unique_ptr<InProcessRunner> runner_;
  CaseResult result_;
  std::map<std::string, Measured> cache_;  // config JSON -> measurement, of this run
  std::map<std::string, TuningRecord> stored_;  // config JSON -> record in measurements_
  // Per policy, per seed: the configs of the run's trials, in order (keys of cache_).
  std::map<std::string, std::vector<Trials>> runs_;
  int retime_configs_ = 0, retime_rounds_ = 0, retime_reach_ = 0;  // SetRetime
  double reach_line_ = 0.95;
  std::pair<double, double> level_range_{0.8, 1.25}, reach_range_{0.8, 1.25};
  bool heuristics_ = false;                      // SetHeuristics
  int label_rounds_ = 1;                         // SetLabelRounds
};

// Retraining time on `rows` synthetic rows of the feature width (reported once): wall
// seconds, and CPU seconds in `cpu` (the wall figure on a shared machine is mostly
// the other processes).
double RetrainSeconds(int rows, int width, double* cpu) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<costmodel::FeatureVector> x(rows, costmodel::FeatureVector(width));
  std::vector<float> y(rows);
  for (int i = 0; i < rows; ++i) {
    for (float& v : x[i]) v = u(rng);
    y[i] = x[i][0] + x[i][1] * x[i][2];
  }
  costmodel::XgbModel m;
  auto t0 = std::chrono::steady_clock::now();
  std::clock_t c0 = std::clock();
  if (!m.Train(x, y).ok()) return -1;
  *cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  return SecondsSince(t0);
}

std::string Svg(const std::vector<CaseResult>& cases) {
  const int w = 480, h = 320, pad = 50;
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w * cases.size() << "' height='" << h
    << "' font-family='sans-serif' font-size='11'>\n";
  const std::map<std::string, std::string> color = {
      {"random", "#d62728"}, {"model", "#1f77b4"}, {"model+transfer", "#2ca02c"},
      {"model+log", "#9467bd"}};
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const CaseResult& c = cases[ci];
    double x0 = ci * w + pad, y0 = h - pad, pw = w - 1.5 * pad, ph = h - 2 * pad;
    size_t n = 0;
    for (const auto& [p, curves] : c.curves)
      for (const Curve& cv : curves) n = std::max(n, cv.size());
    if (n == 0 || c.best_measured <= 0) continue;
    double ymax = c.best_measured * 1.05;
    auto px = [&](size_t i) { return x0 + pw * i / std::max<size_t>(1, n - 1); };
    auto py = [&](double g) { return y0 - ph * g / ymax; };
    s << "<text x='" << x0 << "' y='" << pad - 20 << "'>" << c.task << "</text>\n";
    s << "<line x1='" << x0 << "' y1='" << y0 << "' x2='" << x0 + pw << "' y2='" << y0
      << "' stroke='black'/><line x1='" << x0 << "' y1='" << y0 << "' x2='" << x0 << "' y2='"
      << y0 - ph << "' stroke='black'/>\n";
    s << "<text x='" << x0 + pw / 2 << "' y='" << h - 15 << "'>trials (" << n << ")</text>\n";
    s << "<text x='" << x0 - 45 << "' y='" << y0 - ph << "'>" << static_cast<int>(ymax) << "</text>"
      << "<text x='" << x0 - 45 << "' y='" << y0 - ph / 2 << "'>GFLOP/s</text>\n";
    int legend = 0;
    for (const auto& [p, curves] : c.curves) {
      // Shaded band min..max over seeds, median line.
      std::ostringstream band, line;
      std::vector<double> lo(n), hi(n), med(n);
      for (size_t i = 0; i < n; ++i) {
        std::vector<double> v;
        for (const Curve& cv : curves) v.push_back(cv.empty() ? 0 : cv[std::min(i, cv.size() - 1)]);
        lo[i] = *std::min_element(v.begin(), v.end());
        hi[i] = *std::max_element(v.begin(), v.end());
        med[i] = MedianOr(v, 0);
      }
      for (size_t i = 0; i < n; ++i) band << (i ? " L" : "M") << px(i) << "," << py(hi[i]);
      for (size_t i = n; i-- > 0;) band << " L" << px(i) << "," << py(lo[i]);
      for (size_t i = 0; i < n; ++i) line << (i ? " L" : "M") << px(i) << "," << py(med[i]);
      const std::string& col = color.count(p) ? color.at(p) : "gray";
      s << "<path d='" << band.str() << " Z' fill='" << col
        << "' fill-opacity='0.2' stroke='none'/>\n"
        << "<path d='" << line.str() << "' fill='none' stroke='" << col << "' stroke-width='2'/>\n"
        << "<text x='" << x0 + pw - 60 << "' y='" << y0 - 10 - 14 * legend++ << "' fill='" << col
        << "'>" << p << "</text>\n";
    }
  }
  s << "</svg>\n";
  return s.str();
}


// --- Offline evaluation (--eval-db) -------------------------------------------------

// Per variant and start (cold, from the other shapes' records, warm from their log
// model): SimulateTrialsTo95 on the workload's recorded configs for seeds 1..`seeds`.
nlohmann::json SimulateSearches(const PolicyContext& context, const Variant& v,
                                const std::vector<TuningRecord>& own, const std::vector<TuningRecord>& others,
                                ModelStore* log_store, int seeds, const SimulateOptions& simulate,
                                bool json) {
  nlohmann::json out = nlohmann::json::array();
  struct Start {
    const char* name;
    bool transfer, log;
  };
  for (Start m : {Start{"cold", false, false}, Start{"+transfer", true, false}, Start{"+log", false, true}}) {
    if ((m.transfer && others.empty()) || (m.log && !log_store)) continue;
    std::vector<int> trials;
    absl::StatusOr<SimulatedSearch> s;
    for (int seed = 1; seed <= seeds; ++seed) {
      PolicyContext c = context;
      c.seed = static_cast<uint64_t>(seed);
      if (m.log) c.model_store = log_store;
      s = SimulateTrialsTo95(c, v.options, own, m.transfer ? others : std::vector<TuningRecord>{}, simulate);
      if (!s.ok()) break;
      trials.push_back(s->trials);
    }
    if (!s.ok()) {
      out.push_back({{"variant", v.name}, {"start", m.name}, {"error", std::string(s.status().message())}});
      if (!json)
        std::printf("  %-20s %-10s error: %s\n", v.name.c_str(), m.name,
                    std::string(s.status().message()).c_str());
      continue;
    }
    std::vector<double> sorted(trials.begin(), trials.end());
    const double median = Median(sorted);
    out.push_back({{"variant", v.name},
                   {"start", m.name},
                   {"trials_to_95", trials},
                   {"median", median},
                   {"configs", s->configs},
                   {"within_95", s->within},
                   {"bar_rank", simulate.bar_rank},
                   {"bar_gflops", s->bar / 1e9},
                   {"best_gflops", s->best / 1e9},
                   {"random_expected", s->random_expected}});
    if (!json)
      std::printf("  %-20s %-10s %8.1f %10.1f %6.1fx  %s\n", v.name.c_str(), m.name, median, s->random_expected,
                  s->random_expected / std::max(1.0, median), absl::StrJoin(trials, " ").c_str());
  }
  return out;
}

absl::StatusOr<int> EvalDb(const std::string& path, const std::string& only_case, int splits, int simulate,
                           const SimulateOptions& simulate_options, const std::string& only_variant, bool json) {
  DatabaseOptions o;
  o.path = path;
  o.create_if_missing = false;
  o.read_only = true;
  ASSIGN_OR_RETURN(std::unique_ptr<Database> db, Database::Open(o));
  ASSIGN_OR_RETURN(std::vector<WorkloadSummary> list, db->List());
  std::string only_key;
  if (!only_case.empty()) {
    ASSIGN_OR_RETURN(TuningTask t, ParseTask(only_case));
    only_key = t.WorkloadKey();
  }
  std::map<std::string, std::vector<TuningRecord>> records;  // by workload key + target key
  for (const WorkloadSummary& w : list) {
    ASSIGN_OR_RETURN(records[w.workload.key + "|" + w.target.key],
                     db->Records(w.workload.key, w.target.key));
  }
  nlohmann::json out = {{"db", path}, {"workloads", nlohmann::json::array()}};
  std::vector<Variant> variants;  // none with --splits 0: the scoring speed alone
  if (!only_variant.empty()) {
    ASSIGN_OR_RETURN(Variant v, FindVariant(only_variant));
    variants.push_back(std::move(v));
  } else {
    for (Variant& v : EvalVariants())
      if (!v.search_only) variants.push_back(std::move(v));
  }
  if (splits == 0 && simulate == 0) variants.clear();
  for (const WorkloadSummary& w : list) {
    if (!only_key.empty() && w.workload.key != only_key) continue;
    ASSIGN_OR_RETURN(TuningTask task, ParseTask(w.workload.task_text));
    ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(task));
    PolicyContext context{task, TargetOfRecord(w.target), tmpl, 1, nullptr, {}};
    const std::vector<TuningRecord>& own = records[w.workload.key + "|" + w.target.key];
    std::vector<TuningRecord> others;
    for (const WorkloadSummary& x : list)
      if (x.workload.op == w.workload.op && x.target.key == w.target.key &&
          x.workload.key != w.workload.key) {
        const auto& r = records[x.workload.key + "|" + x.target.key];
        others.insert(others.end(), r.begin(), r.end());
      }
    nlohmann::json jw = {{"task", task.CanonicalText()}, {"target", w.target.key},
                         {"records", own.size()}, {"other_shape_records", others.size()},
                         {"variants", nlohmann::json::array()}};
    if (!json)
      std::printf("\n%s: %zu records, %zu of other shapes\n", task.CanonicalText().c_str(), own.size(),
                  others.size());
    if (!json && splits > 0)
      std::printf("  %-20s %-10s %8s %8s %8s %8s\n", "variant", "train on", "pairwise", "recall", "train s",
                  "rows");
    for (const Variant& v : variants) {
      struct Mode {
        const char* name;
        bool own, transfer, log;
      };
      // The log model of the other shapes (as `db train-model` would build it from a
      // log without this one), for the "log" modes.
      std::optional<OneModelStore> log_store;
      // (The log model has the variant's features, as its own model does.)
      if (!others.empty()) {
        LogModelInfo info;
        absl::StatusOr<std::string> bytes =
            TrainLogModel(*tmpl, context.target, others, LogOptionsFor(v), &info);
        if (bytes.ok()) log_store.emplace(info.key, *bytes);
      }
      if (simulate > 0) {
        if (!json && &v == &variants.front()) {
          const std::string bar = simulate_options.bar_rank == 1
                                      ? "best"
                                      : "config ranked " + std::to_string(simulate_options.bar_rank) + " (--bar-rank)";
          std::printf("  simulated search on the %zu records (seeds 1-%d): trials to 95%% of their %s\n"
                      "  %-20s %-10s %8s %10s %7s  %s\n",
                      own.size(), simulate, bar.c_str(), "variant", "start", "median", "random", "ratio",
                      "per seed");
        }
        nlohmann::json sims = SimulateSearches(context, v, own, others, log_store ? &*log_store : nullptr,
                                               simulate, simulate_options, json);
        for (nlohmann::json& j : sims) jw["simulated"].push_back(std::move(j));
      }
      if (splits == 0) continue;
      for (Mode m : {Mode{"own", true, false, false}, Mode{"others", false, true, false},
                     Mode{"own+others", true, true, false}, Mode{"log", false, false, true},
                     Mode{"own+log", true, false, true}}) {
        if (m.transfer && others.empty()) continue;
        if (m.log && !log_store) continue;
        PolicyContext mode_context = context;
        if (m.log) mode_context.model_store = &*log_store;
        // Mean over `splits` different 75/25 splits: one split of ~80 test configs
        // moves the accuracy by a few hundredths.
        absl::StatusOr<HeldOutResult> r;
        HeldOutResult mean;
        for (int split = 1; split <= splits; ++split) {
          HeldOutOptions h;
          h.split_seed = static_cast<uint64_t>(split);
          r = EvaluateHeldOut(mode_context, v.options, own,
                              m.transfer ? others : std::vector<TuningRecord>{}, h, m.own);
          if (!r.ok()) break;
          mean.train = r->train;
          mean.test = r->test;
          mean.transfer_rows = r->transfer_rows;
          mean.k = r->k;
          mean.pairwise_accuracy += r->pairwise_accuracy / splits;
          mean.recall_at_k += r->recall_at_k / splits;
          mean.train_seconds += r->train_seconds / splits;
        }
        if (!r.ok()) {
          jw["variants"].push_back({{"variant", v.name}, {"train_on", m.name},
                                    {"error", std::string(r.status().message())}});
          if (!json) std::printf("  %-20s %-9s error: %s\n", v.name.c_str(), m.name,
                                 std::string(r.status().message()).c_str());
          continue;
        }
        jw["variants"].push_back({{"variant", v.name},
                                  {"train_on", m.name},
                                  {"pairwise_accuracy", mean.pairwise_accuracy},
                                  {"recall_at_k", mean.recall_at_k},
                                  {"k", mean.k},
                                  {"train", mean.train},
                                  {"transfer_rows", mean.transfer_rows},
                                  {"test", mean.test},
                                  {"splits", splits},
                                  {"train_seconds", mean.train_seconds}});
        if (!json)
          std::printf("  %-20s %-10s %8.3f %6.2f@%-2d %7.3f %8d\n", v.name.c_str(), m.name,
                      mean.pairwise_accuracy, mean.recall_at_k, mean.k, mean.train_seconds,
                      mean.train + mean.transfer_rows);
      }
    }
    absl::StatusOr<ScoringSpeed> speed = MeasureScoringSpeed(context, ModelPolicyOptions{}, own);
    if (speed.ok()) {
      jw["scoring"] = ScoringJson(*speed);
      if (!json) PrintScoring(*speed);
    }
    out["workloads"].push_back(jw);
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

// --retime-level-range / --retime-reach-range: "LO,HI" in percent, 1 <= LO < HI <=
// 10000, as fractions (default 80,125).
absl::StatusOr<std::pair<double, double>> PercentRange(const Flags& flags, const std::string& name) {
  const std::string text = flags.Get(name, "80,125");
  std::vector<std::string> parts = absl::StrSplit(text, ',');
  int lo = 0, hi = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &lo) || !absl::SimpleAtoi(parts[1], &hi) ||
      lo < 1 || hi > 10000 || lo >= hi)
    return absl::InvalidArgumentError("--" + name + " '" + text +
                                      "': want LO,HI in percent, integers with 1 <= LO < HI <= 10000 "
                                      "(default 80,125)");
  return std::pair<double, double>{lo / 100.0, hi / 100.0};
}

// What a shared tuning log (--log) holds for `task`'s operator on `target` in other
// shapes, as this task's template version stored it: each config's first record (its
// label, as the measurement cache serves it), oldest first, as a tuning job reads them.
absl::StatusOr<std::vector<TuningRecord>> OtherShapesInLog(Database& log, const TuningTask& task,
                                                           const Target& target) {
  ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(task));
  ASSIGN_OR_RETURN(std::vector<TuningRecord> records, OtherShapeRecords(log, task, target));
  std::set<std::pair<std::string, std::string>> seen;  // workload key, config
  std::vector<TuningRecord> out;
  for (TuningRecord& r : records)
    if (r.template_name == tmpl->name() && r.template_version == tmpl->version() &&
        seen.insert({r.workload.key, r.config_json}).second)
      out.push_back(std::move(r));
  return out;
}

}  // namespace

// A suite's cases and its defaults.
struct SuiteCases {
  std::vector<std::string> cases;
  int trials = 128, seeds = 3;
  int random_factor = 1;  // the random policy's budget as a multiple of the trials
};

absl::StatusOr<SuiteCases> CasesOfSuite(const std::string& suite) {
  SuiteCases c;
  if (suite == "quick") {  // small shapes of the issue's two matmul families
    c.cases = {"matmul M=256 N=256 K=256", "matmul M=128 N=768 K=192"};
    c.trials = 64;
    c.seeds = 2;
  } else if (suite == "small") {
    c.cases = {"matmul M=256 N=256 K=256", "matmul M=512 N=512 K=512"};
  } else if (suite == "issue") {
    c.cases = {"matmul M=1024 N=1024 K=1024", "matmul M=512 N=3072 K=768"};
    c.trials = 512;
  } else if (suite == "ops") {  // issue 20's operators: two shapes each, same target
    c.cases = {"matmul M=256 N=256 K=256", "matmul M=128 N=768 K=192",
             "conv2d N=1 C=128 H=28 W=28 K=128 R=3 S=3 stride=1 pad=1",
             "conv2d N=1 C=256 H=14 W=14 K=256 R=3 S=3 stride=1 pad=1",
             "dense M=128 N=768 K=768 bias=1 relu=0", "dense M=128 N=3072 K=768 bias=1 relu=1"};
    c.trials = 64;
    c.seeds = 5;
    c.random_factor = 3;
  } else if (suite == "matmul") {  // warm start from a log of four other shapes, not one
    c.cases = {"matmul M=256 N=256 K=256", "matmul M=128 N=768 K=192", "matmul M=64 N=1024 K=256",
             "matmul M=256 N=512 K=128", "matmul M=192 N=192 K=384"};
    c.trials = 64;
    c.seeds = 5;
    c.random_factor = 3;
  } else if (suite == "conv") {  // the ops suite's two convolutions alone
    c.cases = {"conv2d N=1 C=128 H=28 W=28 K=128 R=3 S=3 stride=1 pad=1",
             "conv2d N=1 C=256 H=14 W=14 K=256 R=3 S=3 stride=1 pad=1"};
    c.trials = 64;
    c.seeds = 5;
  } else if (suite == "strided") {  // ResNet-18's 3x3 stride-2 layers (direct only)
    c.cases = {"conv2d N=1 C=64 H=56 W=56 K=128 R=3 S=3 stride=2 pad=1",
             "conv2d N=1 C=128 H=28 W=28 K=256 R=3 S=3 stride=2 pad=1"};
    c.trials = 64;
    c.seeds = 5;
    c.random_factor = 3;
  } else if (suite == "smoke") {
    c.cases = {"matmul M=64 N=64 K=64", "matmul M=32 N=96 K=48"};
    c.trials = 32;
    c.seeds = 2;
  } else {
    return absl::InvalidArgumentError("unknown --suite '" + suite +
                                      "' (quick, small, issue, ops, matmul, conv, strided, smoke)");
  }
  return c;
}

// One case's JSON: the policies' curves, trials to 90% and 95% of the bars, and the
// search issue's goals for it ("goals_met").
nlohmann::json CaseJson(const CaseResult& c, int64_t trials, int64_t random_trials) {
  const std::vector<int> checkpoints = {32, 64, 128, 192, 256, 512};
  auto budget_of = [&](const std::string& policy) { return policy == "random" ? random_trials : trials; };
nlohmann::json jc = {{"task", c.task},
                       {"best_known_gflops", c.best_known},
                       {"best_known_random_trials", c.best_known_trials},
                       {"best_known_cached_gflops", c.best_known_cached},
                       {"best_measured_gflops", c.best_measured},
                       {"retimed", c.retimed},
                       {"reference_random_trials", c.reference_trials},
                       {"reference_random_best_gflops", c.reference_best},
                       {"transfer_records", c.transfer_records},
                       {"stored_measurements", c.stored_measurements},
                       {"log_model_note", c.log_model_note},
                       {"log_model_max_depth", c.log_model_max_depth},
                       {"model", c.model_eval}};
  for (const auto& [policy, curves] : c.curves) {
    const int64_t budget = budget_of(policy);
    nlohmann::json jp = {{"budget", budget}, {"curves", curves}};
    for (int t : checkpoints)
      if (t <= budget) jp["best_gflops_at"][std::to_string(t)] = MedianAt(curves, t);
    for (double frac : {0.90, 0.95}) {
      std::vector<double> v;
      int missed = 0;
      for (const Curve& cv : curves) {
        int n = TrialsToReach(cv, frac * c.best_known);
        if (n == 0)
          ++missed, n = static_cast<int>(budget) + 1;  // counts as "more than the budget"
        v.push_back(n);
      }
      std::string key = frac > 0.92 ? "trials_to_95" : "trials_to_90";
      jp[key] = {{"median", MedianOr(v, 0)}, {"per_seed", v}, {"not_reached", missed}};
    }
    std::vector<double> v;
    for (const Curve& cv : curves) {
      int n = TrialsToReach(cv, 0.95 * c.best_measured);
      v.push_back(n == 0 ? static_cast<double>(budget) + 1 : n);
    }
    jp["trials_to_95_of_best_measured"] = {{"median", MedianOr(v, 0)}, {"per_seed", v}};
    // Before re-timing: the cached numbers' curves against the cached bar.
    const std::vector<Curve>& cached = c.cached_curves.at(policy);
    v.clear();
    for (const Curve& cv : cached) {
      int n = TrialsToReach(cv, 0.95 * c.best_known_cached);
      v.push_back(n == 0 ? static_cast<double>(budget) + 1 : n);
    }
    jp["cached_curves"] = cached;
    jp["trials_to_95_cached"] = {{"median", MedianOr(v, 0)}, {"per_seed", v}};
    jc["policies"][policy] = jp;
  }
  // The issue's goals as ratios of median trials-to-95% (budget + 1 when not reached,
  // so a ratio involving an unreached run is a bound, not a measurement).
  auto to95 = [&](const char* p) {
    return jc["policies"].contains(p) ? jc["policies"][p]["trials_to_95"]["median"].get<double>()
                                      : 0.0;
  };
  if (to95("model") > 0) jc["random_over_model_trials_to_95"] = to95("random") / to95("model");
  // Whether random's median is a bound (more than half its runs missed 95%).
  jc["random_trials_to_95_is_bound"] = to95("random") > static_cast<double>(random_trials);
  for (const char* p : {"model", "model+transfer", "model+log"})
    if (jc["policies"].contains(p))
      jc["policies"][p]["trials_to_95"]["is_bound"] = to95(p) > static_cast<double>(trials);
  // The cold goal "model at T trials >= random at 3T", when random ran that long.
  if (random_trials >= 3 * trials && jc["policies"].contains("model")) {
    jc["model_at_budget"] = MedianAt(c.curves.at("model"), trials);
    jc["random_at_3x_budget"] = MedianAt(c.curves.at("random"), 3 * trials);
  }
  if (to95("model+transfer") > 0)
    jc["scratch_over_transfer_trials_to_95"] = to95("model") / to95("model+transfer");
  if (to95("model+log") > 0)
    jc["random_over_log_trials_to_95"] = to95("random") / to95("model+log");
  // Issue 20's goals for this case (a policy whose median run missed 95% misses them).
  auto within = [&](const char* p, const char* key, double ratio) {
    return jc.contains(key) && !jc["policies"][p]["trials_to_95"]["is_bound"].get<bool>() &&
           jc[key].get<double>() >= ratio;
  };
  nlohmann::json met = nlohmann::json::object();
  if (jc.contains("random_over_model_trials_to_95"))
    met["cold_trials_to_95"] = within("model", "random_over_model_trials_to_95", 3);
  if (jc.contains("model_at_budget"))
    met["cold_model_at_budget"] =
        jc["model_at_budget"].get<double>() >= jc["random_at_3x_budget"].get<double>();
  if (jc.contains("random_over_log_trials_to_95"))
    met["warm_trials_to_95"] = within("model+log", "random_over_log_trials_to_95", 6);
  if (c.model_eval.contains("rank:pairwise") && c.model_eval["rank:pairwise"].contains("pairwise_accuracy"))
    met["accuracy"] = c.model_eval["rank:pairwise"]["pairwise_accuracy"].get<double>() >= 0.88;
  jc["goals_met"] = met;
  return jc;
}

namespace {

// What one `bench search` run (not --eval-db, not --product) does, from its flags.
struct SearchBenchSpec {
  std::string suite;
  std::vector<std::string> cases;
  int64_t trials = 0, random_trials = 0, seeds = 0, reference_trials = 0, label_rounds = 1;
  int64_t retime = 0, retime_rounds = 0, retime_reach = 0, reach_line = 0;
  std::pair<double, double> level_range, reach_range;
  bool heuristics = false;
  bool json = false;
  std::string plot;  // no plot unless asked for, never into the working directory by default
  std::string log;
  Variant model_variant;
};

// The suite's cases, or --model's tasks, or --case's; the budgets and re-timing flags.
absl::StatusOr<SearchBenchSpec> SpecFromFlags(const Flags& flags) {
  SearchBenchSpec spec;
  spec.suite = flags.Get("suite", "quick");
  ASSIGN_OR_RETURN(SuiteCases of_suite, CasesOfSuite(spec.suite));
  spec.cases = of_suite.cases;
  int default_trials = of_suite.trials, default_seeds = of_suite.seeds;
  int random_factor = of_suite.random_factor;  // the random policy's budget as a multiple of --trials
  if (flags.Has("model")) {
    if (flags.Has("case") || flags.Has("suite"))
      return absl::InvalidArgumentError("--model takes the model's tasks: not with --case or --suite");
    const std::string path = flags.Get("model");
    ASSIGN_OR_RETURN(frontend::OnnxModel model, frontend::ReadOnnxModel(path));
    RETURN_IF_ERROR(frontend::CheckSupported(model));
    ASSIGN_OR_RETURN(graph::Graph g, graph::ImportOnnx(model));
    ASSIGN_OR_RETURN(graph::TaskTable table, graph::ExtractTasks(g));
    if (table.tasks.empty()) return absl::InvalidArgumentError(path + " has no tuning task");
    spec.cases.clear();
    for (const graph::ExtractedTask& t : table.tasks) spec.cases.push_back(t.task);
    spec.suite = "model " + path;
    default_trials = 64;
    default_seeds = 3;
    random_factor = 3;
  }
  if (flags.Has("case")) {
    // Several tasks separated by ';' run together, as a suite's cases (transfer among
    // those of one op).
    spec.cases.clear();
    for (absl::string_view part : absl::StrSplit(flags.Get("case"), ';')) {
      std::string task(absl::StripAsciiWhitespace(part));
      if (task.empty())
        return absl::InvalidArgumentError("--case '" + flags.Get("case") + "' has an empty task");
      spec.cases.push_back(std::move(task));
    }
  }
  ASSIGN_OR_RETURN(spec.trials, flags.GetInt("trials", default_trials, 8, 100000));
  ASSIGN_OR_RETURN(spec.seeds, flags.GetInt("seeds", default_seeds, 1, 100));
  ASSIGN_OR_RETURN(spec.reference_trials, flags.GetInt("reference-trials", 0, 0, 100000));
  ASSIGN_OR_RETURN(spec.random_trials,
                   flags.GetInt("random-trials", random_factor * spec.trials, spec.trials, 100000));
  ASSIGN_OR_RETURN(spec.label_rounds, flags.GetInt("label-rounds", 1, 1, 20));
  ASSIGN_OR_RETURN(spec.retime, flags.GetInt("retime", 32, 0, 1000));
  ASSIGN_OR_RETURN(spec.retime_rounds, flags.GetInt("retime-rounds", 5, 1, 100));
  ASSIGN_OR_RETURN(spec.retime_reach, flags.GetInt("retime-reach", 512, 0, 100000));
  ASSIGN_OR_RETURN(spec.reach_line, flags.GetInt("retime-reach-line", 95, 1, 100));
  ASSIGN_OR_RETURN(spec.level_range, PercentRange(flags, "retime-level-range"));
  ASSIGN_OR_RETURN(spec.reach_range, PercentRange(flags, "retime-reach-range"));
  spec.heuristics = flags.Has("heuristics");
  spec.json = flags.Has("json");
  spec.plot = flags.Get("plot", "");
  spec.log = flags.Get("log", "");
  if (flags.Has("variant")) {
    ASSIGN_OR_RETURN(spec.model_variant, FindVariant(flags.Get("variant")));
  }
  return spec;
}

// --log: per case, the shared log's records of the case's operator in other shapes,
// read before anything is measured (so this run's own records, when the log is the
// measurement file, are not part of it).
absl::StatusOr<std::vector<std::vector<TuningRecord>>> LogOthers(const std::string& path,
                                                                 const std::vector<std::string>& cases,
                                                                 const Target& target) {
  DatabaseOptions o;
  o.path = path;
  o.create_if_missing = false;
  o.read_only = true;
  absl::StatusOr<std::unique_ptr<Database>> log = Database::Open(o);
  if (!log.ok()) return absl::InvalidArgumentError("--log: " + std::string(log.status().message()));
  // A case whose operator the log holds in no other shape (ResNet-18's one dense
  // layer beside its conv2d layers) runs without warm runs, as a lone case of its
  // op does without --log; a log that warms no case at all is the wrong file.
  std::vector<std::vector<TuningRecord>> log_others;
  std::vector<std::string> without;
  for (const std::string& text : cases) {
    ASSIGN_OR_RETURN(TuningTask task, ParseTask(text));
    ASSIGN_OR_RETURN(std::vector<TuningRecord> others, OtherShapesInLog(**log, task, target));
    if (others.empty())
      without.push_back(task.op() + " in a shape other than '" + task.CanonicalText() + "' on " + target.Key());
    log_others.push_back(std::move(others));
  }
  if (without.size() == cases.size())
    return absl::InvalidArgumentError("--log " + path + " holds no record of " +
                                      absl::StrJoin(without, ", nor of ") + " (with its template's version)");
  for (const std::string& w : without)
    std::fprintf(stderr, "--log %s holds no record of %s: that case runs without warm runs\n", path.c_str(),
                 w.c_str());
  return log_others;
}

// Every case's cold runs, then its transfer runs: each case again with the model
// pre-trained on the records the other cases of the same operator measured (another
// shape, same target), or with --log on the log's records of the other shapes.
absl::StatusOr<std::vector<CaseResult>> RunCases(const SearchBenchSpec& spec, const Target& target,
                                                 Database* measurements,
                                                 std::vector<std::vector<TuningRecord>> log_others) {
  std::vector<std::unique_ptr<SearchBench>> benches;
  for (const std::string& text : spec.cases) {
    ASSIGN_OR_RETURN(TuningTask task, ParseTask(text));
    if (!spec.json)
      std::fprintf(stderr, "%s: %lld trials (random %lld) x %lld seeds per policy\n", task.CanonicalText().c_str(),
                   static_cast<long long>(spec.trials), static_cast<long long>(spec.random_trials),
                   static_cast<long long>(spec.seeds));
    benches.push_back(std::make_unique<SearchBench>(
        task, target, static_cast<int>(spec.trials), static_cast<int>(spec.random_trials),
        static_cast<int>(spec.seeds), spec.json, static_cast<int>(spec.reference_trials), measurements,
        spec.model_variant.options, LogOptionsFor(spec.model_variant)));
    benches.back()->SetRetime(static_cast<int>(spec.retime), static_cast<int>(spec.retime_rounds),
                              static_cast<int>(spec.retime_reach), static_cast<int>(spec.reach_line),
                              spec.level_range, spec.reach_range);
    benches.back()->SetHeuristics(spec.heuristics);
    benches.back()->SetLabelRounds(static_cast<int>(spec.label_rounds));
    RETURN_IF_ERROR(benches.back()->Run());
  }
  std::vector<std::vector<TuningRecord>> measured;
  for (const auto& b : benches) measured.push_back(b->Records());
  for (size_t i = 0; i < benches.size(); ++i) {
    std::vector<TuningRecord> others;
    if (!log_others.empty()) {
      others = std::move(log_others[i]);
    } else {
      for (size_t j = 0; j < benches.size(); ++j)
        if (j != i && measured[j].front().workload.op == measured[i].front().workload.op)
          others.insert(others.end(), measured[j].begin(), measured[j].end());
    }
    if (!others.empty() && !spec.json)
      std::fprintf(stderr, "%s: model+transfer from %zu records of other shapes%s\n", spec.cases[i].c_str(),
                   others.size(), log_others.empty() ? "" : " in --log");
    RETURN_IF_ERROR(benches[i]->RunTransfer(others));
  }
  std::vector<CaseResult> results;
  for (const auto& b : benches) {
    ASSIGN_OR_RETURN(CaseResult r, b->Finish());
    results.push_back(std::move(r));
  }
  return results;
}

const char* const kSearchBenchNote = "same-budget runs through one measurement cache; conv2d and dense: --suite ops";

// The report: the run's settings, every case (CaseJson) and the goals met over cases.
nlohmann::json ReportJson(const SearchBenchSpec& spec, const std::vector<CaseResult>& results,
                          double retrain_5000, double retrain_cpu) {
  nlohmann::json out = {{"suite", spec.suite},
                        {"trials", spec.trials},
                        {"random_trials", spec.random_trials},
                        {"model_variant", spec.model_variant.name.empty() ? "default" : spec.model_variant.name},
                        {"seeds", spec.seeds},
                        {"heuristics", spec.heuristics},
                        {"log", spec.log},
                        {"label_rounds", spec.label_rounds},
                        {"retime_configs", spec.retime},
                        {"retime_rounds", spec.retime_rounds},
                        {"retime_reach", spec.retime_reach},
                        {"retime_reach_line_percent", spec.reach_line},
                        {"retrain_seconds_5000_rows", retrain_5000},
                        {"retrain_cpu_seconds_5000_rows", retrain_cpu},
                        {"note", kSearchBenchNote},
                        {"cases", nlohmann::json::array()}};
  for (const CaseResult& c : results) {
    nlohmann::json jc = CaseJson(c, spec.trials, spec.random_trials);
    for (const auto& [goal, ok] : jc["goals_met"].items()) {
      nlohmann::json& n = out["goals_met"][goal];
      if (n.is_null()) n = {{"cases", 0}, {"met", 0}};
      n["cases"] = n["cases"].get<int>() + 1;
      n["met"] = n["met"].get<int>() + (ok.get<bool>() ? 1 : 0);
    }
    out["cases"].push_back(jc);
  }
  return out;
}

// The text report of one case (`jc`: CaseJson's).
void PrintCase(const nlohmann::json& jc, const SearchBenchSpec& spec) {
  const std::vector<int> checkpoints = {32, 64, 128, 192, 256, 512};
  const int64_t max_budget = std::max(spec.trials, spec.random_trials);
  std::printf("\n%s (best known %.1f GFLOP/s: the best of %d random trials",
              jc["task"].get<std::string>().c_str(), jc["best_known_gflops"].get<double>(),
              jc["best_known_random_trials"].get<int>());
  if (jc["reference_random_trials"].get<int>() > 0)
    std::printf(", a run of %d of them found %.1f", jc["reference_random_trials"].get<int>(),
                jc["reference_random_best_gflops"].get<double>());
  std::printf("; best measured by any run %.1f)\n", jc["best_measured_gflops"].get<double>());
  if (jc["retimed"].contains("configs"))
    std::printf("  re-timed: the best %d configs and %d probes%s, %d rounds each, level %.3f (from "
                "%s; the best configs' own %.3f); best known from the cached numbers alone %.1f\n",
                jc["retimed"]["configs"].get<int>(), jc["retimed"]["probes"].get<int>(),
                jc["retimed"].contains("discarded")
                    ? ""
                    : (", then " + std::to_string(jc["retimed"]["reach"].get<int>()) + " of the " +
                       std::to_string(jc["retimed"]["reach_wanted"].get<int>()) +
                       " others within " +
                       std::to_string(std::lround(100 * jc["retimed"]["reach_line"].get<double>())) +
                       "% of the bar")
                          .c_str(),
                jc["retimed"]["rounds"].get<int>(), jc["retimed"]["level"].get<double>(),
                jc["retimed"]["level_from"].get<std::string>().c_str(),
                jc["retimed"]["top_level"].get<double>(), jc["best_known_cached_gflops"].get<double>());
  if (jc["retimed"].contains("label_disagreement") && !jc["retimed"]["label_disagreement"].is_null())
    std::printf("  labels against their re-timed medians (the level taken out, %d probes): "
                "median %.1f%%, p90 %.1f%% apart\n",
                jc["retimed"]["label_disagreement"]["probes"].get<int>(),
                100 * jc["retimed"]["label_disagreement"]["median"].get<double>(),
                100 * jc["retimed"]["label_disagreement"]["p90"].get<double>());
  if (jc["retimed"].contains("discarded"))
    std::printf("  re-timing discarded (%s): every figure below is a cached number\n",
                jc["retimed"]["discarded"].get<std::string>().c_str());
  if (jc["retimed"].contains("reach_level") && jc["retimed"]["reach"].get<int>() > 0)
    std::printf("  the others' level %.3f (from %s)%s\n",
                jc["retimed"]["reach_level"].get<double>(),
                jc["retimed"]["reach_level_from"].get<std::string>().c_str(),
                jc["retimed"].contains("reach_discarded") ? ", out of range: discarded" : "");
  std::printf("  %-15s", "policy");
  for (int t : checkpoints)
    if (t <= max_budget) std::printf(" %7s", ("@" + std::to_string(t)).c_str());
  std::printf("  to90%%  to95%%  (cached)  to95%% of best measured  (budget+1 = not reached)\n");
  for (const char* p : {"random", "model", "model+transfer", "model+log"}) {
    if (!jc["policies"].contains(p)) continue;
    const auto& jp = jc["policies"][p];
    std::printf("  %-15s", p);
    for (int t : checkpoints) {
      if (t > max_budget) continue;
      if (jp.contains("best_gflops_at") && jp["best_gflops_at"].contains(std::to_string(t)))
        std::printf(" %7.1f", jp["best_gflops_at"][std::to_string(t)].get<double>());
      else
        std::printf(" %7s", "-");
    }
    std::printf("  %5.0f  %5.0f  (%5.0f)  %5.0f\n", jp["trials_to_90"]["median"].get<double>(),
                jp["trials_to_95"]["median"].get<double>(),
                jp["trials_to_95_cached"]["median"].get<double>(),
                jp["trials_to_95_of_best_measured"]["median"].get<double>());
  }
  // A ratio is a lower bound when random's median missed 95%, and says nothing when
  // the policy's own median missed it.
  auto print_ratio = [&](const char* policy, const char* key, const char* goal) {
    if (!jc.contains(key)) return;
    if (jc["policies"][policy]["trials_to_95"]["is_bound"].get<bool>()) {
      std::printf("  trials to 95%%: %s did not reach 95%% in %lld (median) (goal %s)\n", policy,
                  static_cast<long long>(spec.trials), goal);
      return;
    }
    std::printf("  trials to 95%%: random / %s = %s%.2f (goal %s)\n", policy,
                jc["random_trials_to_95_is_bound"].get<bool>() ? ">= " : "", jc[key].get<double>(),
                goal);
  };
  print_ratio("model", "random_over_model_trials_to_95", ">= 3");
  print_ratio("model+log", "random_over_log_trials_to_95", ">= 6");
  if (jc.contains("model_at_budget"))
    std::printf("  model at %lld trials %.1f vs random at %lld %.1f GFLOP/s (goal: model >= random)\n",
                static_cast<long long>(spec.trials), jc["model_at_budget"].get<double>(),
                static_cast<long long>(3 * spec.trials), jc["random_at_3x_budget"].get<double>());
  if (jc.contains("scratch_over_transfer_trials_to_95"))
    std::printf("  trials to 95%%: model from scratch / model+transfer (%d records) = %.2f "
                "(goal >= 2)\n",
                jc["transfer_records"].get<int>(),
                jc["scratch_over_transfer_trials_to_95"].get<double>());
  const auto& m = jc["model"];
  for (const char* o : {"rank:pairwise", "reg:squarederror"}) {
    if (!m.contains(o) || !m[o].contains("pairwise_accuracy")) continue;
    std::printf(
        "  cost model %-16s held-out pairwise accuracy %.3f, recall@%d %.2f, train %.3f s "
        "(%d train / %d test configs)\n",
        o, m[o]["pairwise_accuracy"].get<double>(), m[o]["k"].get<int>(),
        m[o]["recall_at_k"].get<double>(), m[o]["train_seconds"].get<double>(),
        m["train"].get<int>(), m["test"].get<int>());
  }
  if (m.contains("scoring")) {
    const auto& sc = m["scoring"];
    std::printf(
        "  scoring %d fresh candidates: lower %.1f us + features %.1f us + predict %.1f us per "
        "candidate (CPU time, 1 thread);\n  CostModel::Predict %.0f candidates/s on %d threads (%.1f us "
        "CPU per candidate)\n",
        sc["candidates"].get<int>(), sc["lower_us_per_candidate"].get<double>(),
        sc["extract_us_per_candidate"].get<double>(), sc["predict_us_per_candidate"].get<double>(),
        sc["score_candidates_per_second"].get<double>(), sc["scoring_threads"].get<int>(),
        sc["score_cpu_us_per_candidate"].get<double>());
  }
}

}  // namespace

absl::StatusOr<int> BenchSearchCommand(const std::vector<std::string>& args) {
  if (std::find(args.begin(), args.end(), "--product") != args.end()) return BenchSearchProductCommand(args);
  ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args, {"suite", "seeds", "trials", "case", "plot", "eval-db", "splits", "simulate", "bar-rank", "variant",
                                              "reference-trials", "random-trials", "measurements", "model", "log",
                                              "label-rounds", "retime", "retime-rounds", "retime-reach",
                                              "retime-reach-line", "retime-level-range",
                                              "retime-reach-range"},
                                             {"json", "help", "verbose", "heuristics"}));
  if (flags.Has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!flags.positional().empty())
    return absl::InvalidArgumentError("unexpected argument '" + flags.positional()[0] + "'");
  SetLogLevel(flags.Has("verbose") ? LogLevel::kDebug : LogLevel::kWarning);
  if (flags.Has("eval-db")) {
    ASSIGN_OR_RETURN(int64_t splits, flags.GetInt("splits", 5, 0, 100));
    ASSIGN_OR_RETURN(int64_t simulate, flags.GetInt("simulate", 0, 0, 100));
    ASSIGN_OR_RETURN(int64_t bar_rank, flags.GetInt("bar-rank", 1, 1, 1000));
    if (flags.Has("bar-rank") && simulate == 0)
      return absl::InvalidArgumentError("--bar-rank sets the bar of --simulate: give --simulate S too");
    SimulateOptions simulate_options;
    simulate_options.bar_rank = static_cast<int>(bar_rank);
    return EvalDb(flags.Get("eval-db"), flags.Get("case"), static_cast<int>(splits), static_cast<int>(simulate),
                  simulate_options, flags.Get("variant"), flags.Has("json"));
  }
  ASSIGN_OR_RETURN(const SearchBenchSpec spec, SpecFromFlags(flags));
  const Target target = DetectHostTarget("bench");
  std::unique_ptr<Database> measurements;
  if (flags.Has("measurements")) {
    DatabaseOptions o;
    o.path = flags.Get("measurements");
    ASSIGN_OR_RETURN(measurements, Database::Open(o));
  }
  std::vector<std::vector<TuningRecord>> log_others;
  if (!spec.log.empty()) {
    ASSIGN_OR_RETURN(log_others, LogOthers(spec.log, spec.cases, target));
  }
  ASSIGN_OR_RETURN(const std::vector<CaseResult> results,
                   RunCases(spec, target, measurements.get(), std::move(log_others)));
  double retrain_cpu = 0;
  const double retrain_5000 = RetrainSeconds(5000, costmodel::kNumIrFeatures + 11, &retrain_cpu);
  nlohmann::json out = ReportJson(spec, results, retrain_5000, retrain_cpu);
  if (!spec.plot.empty()) {
    std::ofstream f(spec.plot);
    f << Svg(results);
    if (!f) return absl::UnavailableError("cannot write " + spec.plot);
    out["plot"] = spec.plot;
  }
  if (spec.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("suite %s: %lld trials (random %lld), %lld seeds (median over seeds)\n%s\n", spec.suite.c_str(),
              static_cast<long long>(spec.trials), static_cast<long long>(spec.random_trials),
              static_cast<long long>(spec.seeds), kSearchBenchNote);
  for (const auto& jc : out["cases"]) PrintCase(jc, spec);
  if (out.contains("goals_met")) {
    std::printf("\ngoals met (cases):");
    for (const auto& [goal, n] : out["goals_met"].items())
      std::printf(" %s %d of %d;", goal.c_str(), n["met"].get<int>(), n["cases"].get<int>());
    std::printf("\n");
  }
  std::printf("\nretrain on 5,000 rows: %.2f s (%.2f s CPU; goal <= 2 s)\n", retrain_5000, retrain_cpu);
  if (!spec.plot.empty()) std::printf("plot: %s\n", spec.plot.c_str());
  return 0;
}

}  // namespace tuneforge::cli
