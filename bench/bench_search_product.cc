// `tuneforge bench search --product`: the search as users get it. Each run is a real
// `tuneforge tune` job on the embedded default (in-process server, one local agent
// process, a fresh SQLite file, the job spec `tune` submits with its defaults: the
// heuristic warm start, the finalists re-measured), on shapes no suite, test or model
// of the repository tunes, so no earlier record helps. The model policy gets N trials,
// random search R x N; each run's best config is then timed again in this process,
// all runs of a case interleaved over several rounds, so the machine's slow spells
// cannot favour one policy. Printed: model@N / random@RxN, the sums of best GFLOP/s
// over the seeds, per case and per operator.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/bench.h"
#include "bench/in_process_runner.h"
#include "cli/client.h"
#include "cli/flags.h"
#include "cli/job_spec.h"
#include "compiler/codegen/build.h"
#include "compiler/support/clock.h"
#include "compiler/support/files.h"
#include "compiler/support/log.h"
#include "compiler/support/stats.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"
#include "compiler/templates/template.h"
#include "nlohmann/json.hpp"
#include "server/job_target.h"
#include "tuner/builder.h"

namespace tuneforge::cli {
namespace {

constexpr const char* kProductUsage =
    "usage: tuneforge bench search --product [--case TASK[;TASK...]] [--seeds N] [--trials N]\n"
    "                              [--random-factor R] [--retime-rounds K] [--json]\n"
    "  Real `tuneforge tune` jobs (embedded server, one local agent, a fresh db per run,\n"
    "  the product's default job spec) of the model policy with --trials (default 64)\n"
    "  and of random search with R x --trials (default 3), seeds 1..N (default 3).\n"
    "  Each run's best config is timed again in this process, every run of a case\n"
    "  interleaved over K rounds (default 5). Prints model / random: the sums of the\n"
    "  re-timed best GFLOP/s over the seeds, per case and per operator (and the jobs'\n"
    "  own figures beside), and for context the machine's measured FMA peak (each\n"
    "  policy's mean as a fraction of it) and the strongest vendor library's figure.\n"
    "  --case    default: two GEMMs and two convolutions no suite, test or model of the\n"
    "            repository tunes (unseen by any stored record)\n";

// Shapes nothing else in the repository tunes: a run starts from no record.
const std::vector<std::string> kUnseenCases = {
    "matmul M=320 N=448 K=192",
    "matmul M=96 N=640 K=384",
    "conv2d N=1 C=96 H=20 W=20 K=160 R=3 S=3 stride=1 pad=1",
    "conv2d N=1 C=48 H=36 W=36 K=80 R=1 S=1 stride=1 pad=0",
};

// "model name" of /proc/cpuinfo, for the figures' header.
std::string CpuModelName() {
  const std::string name = CpuModelOfCpuInfo(ReadFile("/proc/cpuinfo").value_or(""));
  return name.empty() ? "unknown CPU" : name;
}

struct ProductRun {
  std::string policy;
  int trials = 0;
  uint64_t seed = 0;
  int trials_done = 0;
  double seconds = 0;
  std::string best_config;
  double job_gflops = 0;      // the job's own best (its finalists re-measured)
  double retimed_gflops = 0;  // the best config timed again beside the other runs'
  std::vector<std::string> warnings;
};

// One `tune` job, as `tuneforge tune --task T --policy P --trials N --seed S` runs it.
absl::StatusOr<ProductRun> RunTuneJob(const std::string& task, const std::string& policy, int trials,
                                      uint64_t seed) {
  ASSIGN_OR_RETURN(TempDir dir, TempDir::Create("tuneforge-bench-product"));
  ASSIGN_OR_RETURN(std::unique_ptr<EmbeddedFarm> farm,
                   EmbeddedFarm::Start(dir.File("tuning.db"), {"local"}, false));
  ASSIGN_OR_RETURN(std::unique_ptr<TuningClient> client,
                   TuningClient::Connect(farm->address(), farm->user_token()));
  ASSIGN_OR_RETURN(Flags flags, Flags::Parse({"--policy", policy}, {"policy"}, {}));
  ASSIGN_OR_RETURN(v1::JobSpec spec, JobSpecFromFlags(flags));
  spec.set_task(task);
  spec.set_trials(trials);
  spec.set_device_key("local");
  spec.set_seed(seed);
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(const std::string job_id, client->Submit(spec));
  ASSIGN_OR_RETURN(v1::JobStatus status, client->Wait(job_id, [](const v1::JobStatus&) {}));
  if (status.state() != v1::SUCCEEDED)
    return absl::InternalError("job " + job_id + " (" + task + ", " + policy + ") did not succeed: " +
                               status.message());
  if (status.best().config_json().empty())
    return absl::InternalError("job " + job_id + " (" + task + ", " + policy + ") has no best config");
  ProductRun run;
  run.policy = policy;
  run.trials = trials;
  run.seed = seed;
  run.trials_done = status.trials_done();
  run.seconds = SecondsSince(start);
  run.best_config = status.best().config_json();
  run.job_gflops = status.best().gflops();
  run.warnings.assign(status.warnings().begin(), status.warnings().end());
  return run;
}

// Times every run's best config again in this process: `rounds` rounds, each config
// once per round in a shuffled order; a config's figure is the median of all its
// samples. Sets retimed_gflops.
absl::Status Retime(const TuningTask& task, int rounds, std::vector<ProductRun>* runs) {
  ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(task));
  const Target target = DetectHostTarget("local");
  std::vector<Candidate> candidates;
  std::map<std::string, size_t> index;  // config JSON -> candidate
  for (const ProductRun& r : *runs) {
    ASSIGN_OR_RETURN(Config c, Config::FromJson(r.best_config));
    if (index.emplace(c.ToJson(), candidates.size()).second) candidates.push_back(Candidate{c});
  }
  Builder builder(2);
  std::vector<BuildResult> built = builder.Build(task, *tmpl, target, candidates);
  InProcessRunner runner(task, 1);
  RETURN_IF_ERROR(runner.Prepare(*tmpl, target));
  std::vector<std::vector<double>> samples(built.size());
  std::vector<size_t> order(built.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937_64 rng(7);
  MeasureOptions options;
  options.min_repeat_ms = 10;
  for (int round = 0; round < rounds; ++round) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order) {
      if (built[i].error != MeasureErrorKind::kNone)
        return absl::InternalError("best config of a run does not build: " + built[i].error_message);
      MeasureResult m = runner.Measure({MeasureInput{task.CanonicalText(), built[i].candidate.config.ToJson(),
                                                     built[i].artifact, nullptr, options}})[0];
      if (m.error != MeasureErrorKind::kNone)
        return absl::InternalError("best config of a run fails when timed again: " + m.error_message);
      samples[i].insert(samples[i].end(), m.costs.begin(), m.costs.end());
    }
  }
  for (ProductRun& r : *runs) {
    const size_t i = index.at(Config::FromJson(r.best_config)->ToJson());
    r.retimed_gflops = task.Flops() / Median(samples[i]) / 1e9;
  }
  return absl::OkStatus();
}

struct Sums {
  double model = 0, random = 0, model_job = 0, random_job = 0;
  void Add(const ProductRun& r) {
    (r.policy == "model" ? model : random) += r.retimed_gflops;
    (r.policy == "model" ? model_job : random_job) += r.job_gflops;
  }
  double ratio() const { return random > 0 ? model / random : 0; }
  double job_ratio() const { return random_job > 0 ? model_job / random_job : 0; }
};

}  // namespace

absl::StatusOr<int> BenchSearchProductCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args, {"case", "seeds", "trials", "random-factor", "retime-rounds"},
                                             {"product", "json", "help", "verbose"}));
  if (flags.Has("help")) {
    std::fputs(kProductUsage, stdout);
    return 0;
  }
  if (!flags.positional().empty())
    return absl::InvalidArgumentError("unexpected argument '" + flags.positional()[0] + "'");
  SetLogLevel(flags.Has("verbose") ? LogLevel::kDebug : LogLevel::kWarning);
  ASSIGN_OR_RETURN(int64_t seeds, flags.GetInt("seeds", 3, 1, 100));
  ASSIGN_OR_RETURN(int64_t trials, flags.GetInt("trials", 64, 1, 100000));
  ASSIGN_OR_RETURN(int64_t factor, flags.GetInt("random-factor", 3, 1, 100));
  ASSIGN_OR_RETURN(int64_t rounds, flags.GetInt("retime-rounds", 5, 1, 100));
  std::vector<std::string> cases = kUnseenCases;
  if (flags.Has("case")) {
    cases.clear();
    for (absl::string_view c : absl::StrSplit(flags.Get("case"), ';', absl::SkipWhitespace()))
      cases.emplace_back(c);
    if (cases.empty()) return absl::InvalidArgumentError("--case is empty");
  }
  std::vector<TuningTask> tasks;
  for (const std::string& c : cases) {
    ASSIGN_OR_RETURN(TuningTask t, ParseTask(c));
    RETURN_IF_ERROR(FindTemplate(t).status());
    tasks.push_back(std::move(t));
  }
  const bool json = flags.Has("json");
  const Target host = DetectHostTarget("local");
  if (!json)
    std::printf("bench search --product: %s (%s, %d threads); model %lld trials vs random %lld, seeds 1-%lld\n",
                CpuModelName().c_str(), host.cpu.c_str(), host.num_threads, static_cast<long long>(trials),
                static_cast<long long>(trials * factor), static_cast<long long>(seeds));
  nlohmann::json out = {{"cpu", CpuModelName()}, {"llvm_cpu", host.cpu}, {"threads", host.num_threads},
                        {"trials", trials}, {"random_trials", trials * factor}, {"seeds", seeds},
                        {"retime_rounds", rounds}, {"cases", nlohmann::json::array()}};
  // How much room the search has: the machine's FMA peak, and per case the strongest
  // vendor library. Where random search already reaches most of the peak, no policy
  // can be far ahead of it.
  const double peak = MeasureFmaPeakGflops(host.num_threads);
  out["fma_peak_gflops"] = peak;
  if (!json) std::printf("measured FMA peak %.1f GFLOP/s on %d threads\n", peak, host.num_threads);
  std::map<std::string, Sums> by_op;
  Sums all;
  for (const TuningTask& task : tasks) {
    std::vector<ProductRun> runs;
    for (uint64_t seed = 1; seed <= static_cast<uint64_t>(seeds); ++seed) {
      for (const auto& [policy, n] : {std::pair<std::string, int64_t>{"model", trials}, {"random", trials * factor}}) {
        ASSIGN_OR_RETURN(ProductRun run, RunTuneJob(task.CanonicalText(), policy, static_cast<int>(n), seed));
        if (!json)
          std::fprintf(stderr, "  %s seed %llu %s@%lld: %.1f GFLOP/s (job), %.0f s\n", task.CanonicalText().c_str(),
                       static_cast<unsigned long long>(seed), policy.c_str(), static_cast<long long>(n),
                       run.job_gflops, run.seconds);
        runs.push_back(std::move(run));
      }
    }
    RETURN_IF_ERROR(Retime(task, static_cast<int>(rounds), &runs));
    Sums sums;
    nlohmann::json case_json = {{"task", task.CanonicalText()}, {"op", task.op()}, {"runs", nlohmann::json::array()}};
    for (const ProductRun& r : runs) {
      sums.Add(r);
      by_op[task.op()].Add(r);
      all.Add(r);
      case_json["runs"].push_back({{"policy", r.policy}, {"trials", r.trials}, {"seed", r.seed},
                                   {"trials_done", r.trials_done}, {"seconds", r.seconds},
                                   {"best_config", r.best_config}, {"job_gflops", r.job_gflops},
                                   {"retimed_gflops", r.retimed_gflops}, {"warnings", r.warnings}});
    }
    case_json["model_over_random"] = sums.ratio();
    case_json["model_over_random_job"] = sums.job_ratio();
    case_json["model_peak_fraction"] = sums.model / static_cast<double>(seeds) / peak;
    case_json["random_peak_fraction"] = sums.random / static_cast<double>(seeds) / peak;
    absl::StatusOr<VendorSpeed> vendor = StrongestVendor(task, host.num_threads);
    if (vendor.ok()) {
      case_json["vendor"] = {{"name", vendor->name}, {"gflops", vendor->gflops}};
    } else {
      case_json["vendor"] = {{"error", std::string(vendor.status().message())}};
    }
    out["cases"].push_back(case_json);
    if (!json) {
      std::printf("%-58s", task.CanonicalText().c_str());
      for (const ProductRun& r : runs)
        std::printf(" %s%llu %.1f", r.policy == "model" ? "m" : "r", static_cast<unsigned long long>(r.seed),
                    r.retimed_gflops);
      std::printf("\n  model/random %.3f (jobs' own figures %.3f); means at %.0f%% / %.0f%% of the FMA peak; ",
                  sums.ratio(), sums.job_ratio(), 100 * case_json["model_peak_fraction"].get<double>(),
                  100 * case_json["random_peak_fraction"].get<double>());
      if (vendor.ok()) {
        std::printf("strongest vendor %s %.1f GFLOP/s\n", vendor->name.c_str(), vendor->gflops);
      } else {
        std::printf("no vendor figure: %s\n", std::string(vendor.status().message()).c_str());
      }
      std::fflush(stdout);
    }
  }
  out["by_op"] = nlohmann::json::object();
  for (const auto& [op, s] : by_op) {
    out["by_op"][op] = {{"model_over_random", s.ratio()}, {"model_over_random_job", s.job_ratio()}};
    if (!json) std::printf("%s: model@%lld / random@%lld = %.3f (jobs' own %.3f)\n", op.c_str(),
                           static_cast<long long>(trials), static_cast<long long>(trials * factor), s.ratio(),
                           s.job_ratio());
  }
  out["model_over_random"] = all.ratio();
  out["model_over_random_job"] = all.job_ratio();
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("all: model@%lld / random@%lld = %.3f (jobs' own %.3f)\n", static_cast<long long>(trials),
                static_cast<long long>(trials * factor), all.ratio(), all.job_ratio());
  }
  return 0;
}

}  // namespace tuneforge::cli
