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
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>

#include "compiler/codegen/build.h"
#include "compiler/reference/reference.h"
#include "compiler/runtime/module_loader.h"
#include "compiler/runtime/runtime.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"
#include "costmodel/xgb_model.h"
#include "nlohmann/json.hpp"
#include "server/cli/commands.h"
#include "server/cli/flags.h"
#include "tuner/builder.h"
#include "tuner/model_policy.h"
#include "tuner/runner.h"
#include "tuner/search_policy.h"

namespace tuneforge::cli {
namespace {

constexpr const char* kUsage =
    "usage: tuneforge bench search [--suite small|issue|smoke] [--seeds N] [--trials N]\n"
    "                              [--case TASK]... [--plot FILE.svg] [--json]\n"
    "  --suite   small (default): matmul 256^3 and 512^3, 128 trials\n"
    "            issue: matmul 1024^3 and 512x3072x768, 512 trials (slow)\n"
    "            smoke: matmul 64^3, 32 trials, 2 seeds (seconds)\n"
    "  --seeds   seeds per policy (default 3; smoke 2)\n"
    "  --trials  budget per run (default: the suite's)\n"
    "  --case    a task instead of the suite's cases\n"
    "  --plot    SVG of best-so-far GFLOP/s vs trials (default bench_search.svg)\n"
    "  --json    one JSON object on stdout\n"
    "Kernels are built and timed in this process (warm-up, then 3 samples of >= 10 ms).\n";

// Measures Artifacts in this process: loads the shared object, checks the output once
// against the reference, then times it like the agent does (warm-up, `number` doubled
// until a sample lasts min_repeat_ms, `repeat` samples). No sandbox: a kernel that
// crashes takes the benchmark with it, which is acceptable for a benchmark of kernels
// the test suite already checks.
class InProcessRunner : public Runner {
 public:
  InProcessRunner(const TuningTask& task, uint64_t seed) : task_(task), seed_(seed) {}

  absl::Status Prepare(const Template& tmpl, const Target& target) {
    ASSIGN_OR_RETURN(ir::LoweredFunc naive,
                     tmpl.Instantiate(task_, target, tmpl.Naive(task_, target)));
    for (const ir::BufferParam& p : naive.params) {
      is_output_.push_back(p.is_output);
      if (p.is_internal) prepacked_sizes_[is_output_.size() - 1] = p.NumElements();
    }
    inputs_ = MakeInputs(task_, seed_);
    ASSIGN_OR_RETURN(expected_, ReferenceOutput(task_, inputs_));
    tolerance_ = ToleranceFor(task_);
    return absl::OkStatus();
  }

  std::vector<MeasureResult> Measure(const std::vector<MeasureInput>& inputs) override {
    std::vector<MeasureResult> out;
    for (const MeasureInput& in : inputs) out.push_back(MeasureOne(in));
    return out;
  }

 private:
  MeasureResult MeasureOne(const MeasureInput& in) {
    MeasureResult r;
    std::string error;
    auto module =
        runtime::LoadedModule::Load(in.artifact->shared_object, in.artifact->entry_symbol, &error);
    if (!module) {
      r.error = MeasureErrorKind::kRuntimeError;
      r.error_message = error;
      return r;
    }
    std::vector<float> output(expected_.size(), NAN);
    std::vector<void*> buffers;  // entry-point order; MakeInputs skips output and prepacked
    std::vector<std::vector<float>> prepacked;
    size_t next_input = 0;
    for (size_t i = 0; i < is_output_.size(); ++i) {
      if (prepacked_sizes_.count(i)) {
        prepacked.emplace_back(prepacked_sizes_[i]);
        buffers.push_back(prepacked.back().data());
      } else {
        buffers.push_back(is_output_[i] ? output.data() : inputs_[next_input++].data());
      }
    }
    if (module->Prepack(buffers.data()) != 0 || module->Run(buffers.data()) != 0 ||
        module->Unpack(buffers.data()) != 0) {
      r.error = MeasureErrorKind::kRuntimeError;
      r.error_message = "kernel returned non-zero";
      return r;
    }
    if (runtime::FirstMismatch(output.data(), expected_.data(), expected_.size(), tolerance_.atol,
                               tolerance_.rtol) >= 0) {
      r.error = MeasureErrorKind::kWrongAnswer;
      return r;
    }
    using Clock = std::chrono::steady_clock;
    auto time = [&](int number) {
      auto t0 = Clock::now();
      for (int i = 0; i < number; ++i) module->Run(buffers.data());
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    const MeasureOptions& o = in.options;
    for (int i = 0; i < o.warmup; ++i) time(1);
    int number = std::max(1, o.number);
    while (time(number) * 1e3 < o.min_repeat_ms && number < (1 << 20)) number *= 2;
    for (int i = 0; i < o.repeat; ++i) r.costs.push_back(time(number) / number);
    return r;
  }

  TuningTask task_;
  uint64_t seed_;
  std::vector<bool> is_output_;
  std::map<size_t, int64_t> prepacked_sizes_;  // param index -> elements (dense's W.packed)
  std::vector<std::vector<float>> inputs_;
  std::vector<float> expected_;
  Tolerance tolerance_;
};

struct Measured {
  double gflops = 0;  // 0 = failed
  TuningRecord record;
};

// One run: best-so-far GFLOP/s after each trial.
using Curve = std::vector<double>;

struct CaseResult {
  std::string task;
  std::map<std::string, std::vector<Curve>> curves;  // policy -> one curve per seed
  nlohmann::json model_eval;
  double best_known = 0;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// First trial (1-based) at which the curve reaches `target`, or 0 if never.
int TrialsToReach(const Curve& c, double target) {
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i] >= target) return static_cast<int>(i) + 1;
  return 0;
}

class SearchBench {
 public:
  SearchBench(TuningTask task, Target target, int trials, int seeds, bool quiet)
      : task_(std::move(task)),
        target_(std::move(target)),
        trials_(trials),
        seeds_(seeds),
        quiet_(quiet),
        builder_(2) {}

  absl::StatusOr<CaseResult> Run() {
    ASSIGN_OR_RETURN(tmpl_, FindTemplate(task_));
    InProcessRunner runner(task_, 1);
    RETURN_IF_ERROR(runner.Prepare(*tmpl_, target_));
    CaseResult result;
    result.task = task_.CanonicalText();
    for (int seed = 1; seed <= seeds_; ++seed) {
      for (const char* policy : {"random", "model"}) {
        ASSIGN_OR_RETURN(Curve c, RunPolicy(policy, seed, &runner));
        result.curves[policy].push_back(std::move(c));
      }
    }
    for (const auto& [p, curves] : result.curves)
      for (const Curve& c : curves)
        if (!c.empty()) result.best_known = std::max(result.best_known, c.back());
    result.model_eval = EvaluateModel();
    return result;
  }

 private:
  PolicyContext Context(uint64_t seed) const {
    return PolicyContext{task_, target_, tmpl_, seed, nullptr};
  }

  absl::StatusOr<Curve> RunPolicy(const std::string& name, uint64_t seed, Runner* runner) {
    ASSIGN_OR_RETURN(std::unique_ptr<SearchPolicy> policy, MakeSearchPolicy(name, Context(seed)));
    Curve curve;
    double best = 0;
    auto start = std::chrono::steady_clock::now();
    while (static_cast<int>(curve.size()) < trials_) {
      int n = std::min(8, trials_ - static_cast<int>(curve.size()));
      std::vector<Config> configs = policy->Propose(n);
      if (configs.empty()) break;
      std::vector<TuningRecord> records = MeasureConfigs(configs, runner);
      for (const TuningRecord& r : records) {
        best = std::max(best, cache_[r.config_json].gflops);
        curve.push_back(best);
      }
      policy->Observe(records);
    }
    if (!quiet_)
      std::fprintf(stderr, "  %-6s seed %llu: best %.1f GFLOP/s after %zu trials (%.0f s)\n",
                   name.c_str(), static_cast<unsigned long long>(seed), best, curve.size(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return curve;
  }

  std::vector<TuningRecord> MeasureConfigs(const std::vector<Config>& configs, Runner* runner) {
    std::vector<Candidate> to_build;
    for (const Config& c : configs)
      if (!cache_.count(c.ToJson())) to_build.push_back(Candidate{c, false});
    if (!to_build.empty()) {
      std::vector<BuildResult> built = builder_.Build(task_, *tmpl_, target_, to_build);
      MeasureOptions options;
      options.min_repeat_ms = 10;
      for (const BuildResult& b : built) {
        MeasureResult m;
        if (b.error != MeasureErrorKind::kNone) {
          m.error = b.error;
          m.error_message = b.error_message;
        } else {
          m = runner->Measure({MeasureInput{task_.CanonicalText(), b.candidate.config.ToJson(),
                                            b.artifact, nullptr, options}})[0];
        }
        TuningRecord r;
        r.workload = WorkloadInfo{task_.WorkloadKey(), task_.op(), task_.CanonicalText(),
                                  task_.ToJson(), task_.Flops()};
        r.target.key = target_.Key();
        r.template_name = tmpl_->name();
        r.template_version = tmpl_->version();
        r.config_json = b.candidate.config.ToJson();
        r.result = m;
        double gflops =
            m.error == MeasureErrorKind::kNone ? task_.Flops() / m.MedianCost() / 1e9 : 0;
        cache_[r.config_json] = Measured{gflops, r};
      }
    }
    std::vector<TuningRecord> out;
    for (const Config& c : configs) out.push_back(cache_.at(c.ToJson()).record);
    return out;
  }

  // Held-out evaluation of the cost model on every distinct config measured for this
  // case: 75% train, 25% test (fixed shuffle), both objectives.
  nlohmann::json EvaluateModel() {
    std::vector<const Measured*> all;
    for (const auto& [k, m] : cache_) all.push_back(&m);
    std::mt19937_64 rng(42);
    std::shuffle(all.begin(), all.end(), rng);
    size_t n_train = all.size() * 3 / 4;
    std::vector<TuningRecord> train;
    std::vector<Config> test;
    std::vector<float> labels;
    for (size_t i = 0; i < all.size(); ++i) {
      if (i < n_train) {
        train.push_back(all[i]->record);
      } else {
        test.push_back(*Config::FromJson(all[i]->record.config_json));
        labels.push_back(static_cast<float>(all[i]->gflops));
      }
    }
    nlohmann::json out = {{"records", all.size()}, {"train", n_train}, {"test", test.size()}};
    for (const char* objective : {"rank:pairwise", "reg:squarederror"}) {
      ModelPolicyOptions o;
      o.xgb.objective = objective;
      ModelPolicy policy(Context(1), o);
      policy.Observe(train);
      absl::Status st = policy.Retrain();
      absl::StatusOr<std::vector<float>> scores = st.ok() ? policy.Score(test) : st;
      if (!scores.ok()) {
        out[objective] = {{"error", std::string(scores.status().message())}};
        continue;
      }
      int k = std::max<int>(1, std::min<int>(10, test.size() / 5));
      out[objective] = {{"pairwise_accuracy", costmodel::PairwiseAccuracy(*scores, labels)},
                        {"recall_at_k", costmodel::RecallAtK(*scores, labels, k)},
                        {"k", k},
                        {"train_seconds", policy.last_train_seconds()}};
    }
    // Scoring throughput (lowering + features + predict) on fresh random configs, with
    // the default objective, and retraining time on 5,000 rows (the training set
    // repeated; the time depends on rows, not on their diversity).
    ModelPolicy policy(Context(2), ModelPolicyOptions{});
    policy.Observe(train);
    if (policy.Retrain().ok() && policy.model().trained()) {
      ConfigSpace space = tmpl_->Space(task_, target_);
      std::vector<Config> fresh;
      for (int i = 0; i < 5000; ++i) fresh.push_back(*space.Sample(rng));
      auto t0 = std::chrono::steady_clock::now();
      auto scores = policy.Score(fresh);
      double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (scores.ok()) out["scoring_candidates_per_second"] = fresh.size() / secs;
    }
    return out;
  }

  TuningTask task_;
  Target target_;
  int trials_, seeds_;
  bool quiet_;
  Builder builder_;
  const Template* tmpl_ = nullptr;
  std::map<std::string, Measured> cache_;  // config JSON -> measurement
};

// Retraining time on `rows` synthetic rows of the feature width (reported once).
double RetrainSeconds(int rows, int width) {
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
  if (!m.Train(x, y).ok()) return -1;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string Svg(const std::vector<CaseResult>& cases) {
  const int w = 480, h = 320, pad = 50;
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w * cases.size() << "' height='" << h
    << "' font-family='sans-serif' font-size='11'>\n";
  const std::map<std::string, std::string> color = {{"random", "#d62728"}, {"model", "#1f77b4"}};
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const CaseResult& c = cases[ci];
    double x0 = ci * w + pad, y0 = h - pad, pw = w - 1.5 * pad, ph = h - 2 * pad;
    size_t n = 0;
    for (const auto& [p, curves] : c.curves)
      for (const Curve& cv : curves) n = std::max(n, cv.size());
    if (n == 0 || c.best_known <= 0) continue;
    double ymax = c.best_known * 1.05;
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
        med[i] = Median(v);
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

}  // namespace

absl::StatusOr<int> BenchSearchCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args, {"suite", "seeds", "trials", "case", "plot"},
                                             {"json", "help", "verbose"}));
  if (flags.Has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!flags.positional().empty())
    return absl::InvalidArgumentError("unexpected argument '" + flags.positional()[0] + "'");
  SetLogLevel(flags.Has("verbose") ? LogLevel::kDebug : LogLevel::kWarning);
  std::string suite = flags.Get("suite", "small");
  std::vector<std::string> cases;
  int default_trials = 128, default_seeds = 3;
  if (suite == "small") {
    cases = {"matmul M=256 N=256 K=256", "matmul M=512 N=512 K=512"};
  } else if (suite == "issue") {
    cases = {"matmul M=1024 N=1024 K=1024", "matmul M=512 N=3072 K=768"};
    default_trials = 512;
  } else if (suite == "smoke") {
    cases = {"matmul M=64 N=64 K=64"};
    default_trials = 32;
    default_seeds = 2;
  } else {
    return absl::InvalidArgumentError("unknown --suite '" + suite + "' (small, issue, smoke)");
  }
  if (flags.Has("case")) cases = {flags.Get("case")};
  ASSIGN_OR_RETURN(int64_t trials, flags.GetInt("trials", default_trials, 8, 100000));
  ASSIGN_OR_RETURN(int64_t seeds, flags.GetInt("seeds", default_seeds, 1, 100));
  bool json = flags.Has("json");
  std::string plot = flags.Get("plot", "bench_search.svg");

  Target target = DetectHostTarget("bench");
  std::vector<CaseResult> results;
  for (const std::string& text : cases) {
    ASSIGN_OR_RETURN(TuningTask task, ParseTask(text));
    if (!json)
      std::fprintf(stderr, "%s: %lld trials x %lld seeds per policy\n",
                   task.CanonicalText().c_str(), static_cast<long long>(trials),
                   static_cast<long long>(seeds));
    SearchBench bench(task, target, static_cast<int>(trials), static_cast<int>(seeds), json);
    ASSIGN_OR_RETURN(CaseResult r, bench.Run());
    results.push_back(std::move(r));
  }
  double retrain_5000 = RetrainSeconds(5000, costmodel::kNumIrFeatures + 10);

  nlohmann::json out = {{"suite", suite},
                        {"trials", trials},
                        {"seeds", seeds},
                        {"retrain_seconds_5000_rows", retrain_5000},
                        {"cases", nlohmann::json::array()}};
  const std::vector<int> checkpoints = {32, 64, 128, 256, 512};
  for (const CaseResult& c : results) {
    nlohmann::json jc = {
        {"task", c.task}, {"best_known_gflops", c.best_known}, {"model", c.model_eval}};
    for (const auto& [policy, curves] : c.curves) {
      nlohmann::json jp;
      for (int t : checkpoints) {
        if (t > trials) continue;
        std::vector<double> v;
        for (const Curve& cv : curves)
          if (!cv.empty()) v.push_back(cv[std::min<size_t>(t, cv.size()) - 1]);
        jp["best_gflops_at"][std::to_string(t)] = Median(v);
      }
      for (double frac : {0.90, 0.95}) {
        std::vector<double> v;
        int missed = 0;
        for (const Curve& cv : curves) {
          int n = TrialsToReach(cv, frac * c.best_known);
          if (n == 0)
            ++missed, n = static_cast<int>(trials) + 1;  // counts as "more than the budget"
          v.push_back(n);
        }
        std::string key = frac > 0.92 ? "trials_to_95" : "trials_to_90";
        jp[key] = {{"median", Median(v)}, {"per_seed", v}, {"not_reached", missed}};
      }
      jc["policies"][policy] = jp;
    }
    out["cases"].push_back(jc);
  }
  if (!plot.empty()) {
    std::ofstream f(plot);
    f << Svg(results);
    if (!f) return absl::UnavailableError("cannot write " + plot);
    out["plot"] = plot;
  }
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  for (const auto& jc : out["cases"]) {
    std::printf("\n%s (best known %.1f GFLOP/s)\n", jc["task"].get<std::string>().c_str(),
                jc["best_known_gflops"].get<double>());
    std::printf("  %-7s", "policy");
    for (int t : checkpoints)
      if (t <= trials) std::printf(" %7s", ("@" + std::to_string(t)).c_str());
    std::printf("  to90%%  to95%%  (median over seeds; %lld+1 = not reached)\n",
                static_cast<long long>(trials));
    for (const char* p : {"random", "model"}) {
      const auto& jp = jc["policies"][p];
      std::printf("  %-7s", p);
      for (int t : checkpoints)
        if (t <= trials)
          std::printf(" %7.1f", jp["best_gflops_at"][std::to_string(t)].get<double>());
      std::printf("  %5.0f  %5.0f\n", jp["trials_to_90"]["median"].get<double>(),
                  jp["trials_to_95"]["median"].get<double>());
    }
    const auto& m = jc["model"];
    for (const char* o : {"rank:pairwise", "reg:squarederror"}) {
      if (!m.contains(o) || !m[o].contains("pairwise_accuracy")) continue;
      std::printf(
          "  cost model %-16s held-out pairwise accuracy %.3f, recall@%d %.2f, train %.3f s "
          "(%d records)\n",
          o, m[o]["pairwise_accuracy"].get<double>(), m[o]["k"].get<int>(),
          m[o]["recall_at_k"].get<double>(), m[o]["train_seconds"].get<double>(),
          m["train"].get<int>());
    }
    if (m.contains("scoring_candidates_per_second"))
      std::printf("  scoring (lower + features + predict): %.0f candidates/s\n",
                  m["scoring_candidates_per_second"].get<double>());
  }
  std::printf("\nretrain on 5,000 rows: %.2f s\n", retrain_5000);
  if (!plot.empty()) std::printf("plot: %s\n", plot.c_str());
  return 0;
}

}  // namespace tuneforge::cli
