// `tuneforge bench kernels`: tuned tuneforge kernels side by side with the vendor
// library, in one process, on the same inputs and thread count.
//
// Per case (a TuningTask) and thread count:
//   1. tune in process: the template's Heuristics() first, then `--trials` configs from
//      the RandomPolicy SearchPolicy; each candidate is built (BuildArtifact), loaded
//      (LoadedModule), checked once against the reference (a wrong kernel can never
//      win) and timed with the agent's protocol (warm-up, `number` runs per sample
//      grown to min_sample_ms, `repeat` samples, median);
//   2. re-measure the top 3 interleaved and keep the fastest;
//   3. time that kernel and the vendor library ALTERNATELY (sample of one, sample of
//      the other, ...), medians of both, so drift on a shared machine hits both sides.
// Vendor: OpenBLAS cblas_sgemm (row-major, openblas_set_num_threads = threads) for
// matmul, and one cblas_sgemm per matrix for batch_matmul. The vendor output is checked against the reference too.
//
// Nothing here is asserted: the figures are for people (BENCHMARKS.md).
#include <cblas.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "compiler/codegen/build.h"
#include "compiler/reference/reference.h"
#include "compiler/runtime/module_loader.h"
#include "compiler/runtime/runtime.h"
#include "compiler/support/log.h"
#include "compiler/support/status.h"
#include "compiler/task/task.h"
#include "compiler/templates/template.h"
#include "nlohmann/json.hpp"
#include "server/cli/commands.h"
#include "server/cli/flags.h"
#include "tuner/search_policy.h"

namespace tuneforge::cli {
namespace {

using nlohmann::json;

constexpr const char* kBenchKernelsUsage =
    "usage: tuneforge bench kernels [--suite quick|full|smoke] [--task TEXT] [--trials N]\n"
    "                               [--threads 1,2] [--min-sample-ms MS] [--seed S] [--json]\n"
    "  Tunes each case of the suite in process (template heuristics + N random configs),\n"
    "  then times the best kernel and the vendor library (OpenBLAS cblas_sgemm)\n"
    "  alternately and prints tuneforge GFLOP/s, vendor GFLOP/s, their ratio and the\n"
    "  geometric mean of the ratios per operator and thread count.\n"
    "  --suite    quick (default, a few minutes on 2 cores), full (every case of issue 3\n"
    "             that has a template), smoke (tiny, for tests)\n"
    "  --task     benchmark this one task instead of a suite\n"
    "  --trials   random configs per case on top of the heuristics (suite default)\n"
    "  --threads  comma-separated thread counts (default 1,2)\n"
    "  --json     print JSON instead of the table\n";

struct Suite {
  std::string name;
  std::vector<std::string> tasks;
  int trials;            // random configs per case, on top of the heuristics
  double min_sample_ms;  // final timing; tuning uses half of it
};

const std::vector<Suite>& Suites() {
  static const auto* suites = new std::vector<Suite>{
      {"smoke", {"matmul M=37 N=64 K=29", "matmul M=1 N=100 K=64", "batch_matmul B=3 M=5 N=32 K=9"},
       3, 2},
      {"quick",
       {"matmul M=1024 N=1024 K=1024", "matmul M=128 N=768 K=768", "matmul M=64 N=1000 K=2048",
        "batch_matmul B=12 M=128 N=128 K=64"},
       16,
       40},
      {"full",
       {"matmul M=1024 N=1024 K=1024", "matmul M=512 N=3072 K=768", "matmul M=128 N=768 K=768",
        "matmul M=64 N=1000 K=2048", "matmul M=1 N=4096 K=4096",
        "batch_matmul B=12 M=128 N=128 K=64"},
       200,
       100},
  };
  return *suites;
}

// 64-byte aligned float buffer (a cache line; an AVX-512 vector).
struct AlignedBuffer {
  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  explicit AlignedBuffer(int64_t n)
      : size(n),
        data(static_cast<float*>(std::aligned_alloc(
            64, static_cast<size_t>((std::max<int64_t>(n, 1) * 4 + 63) / 64 * 64)))) {
    TF_CHECK(data != nullptr, "out of memory");
  }
  int64_t size;
  std::unique_ptr<float, Free> data;
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CPU seconds of this thread plus of waited-for children (the linker): the build
// cost without the wait for other processes on a shared machine.
double BuildCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  rusage kids{};
  getrusage(RUSAGE_CHILDREN, &kids);
  auto tv = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9 + tv(kids.ru_utime) +
         tv(kids.ru_stime);
}

double Median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::infinity();
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One runnable side of the comparison: a loaded kernel or a vendor call.
using RunFn = std::function<void()>;

// The agent's protocol, in process: runs per sample grown (doubling) until a sample
// lasts `min_sample_s`; returns that number of runs.
int64_t Calibrate(const RunFn& run, double min_sample_s) {
  int64_t number = 1;
  for (;;) {
    double start = Now();
    for (int64_t i = 0; i < number; ++i) run();
    double s = Now() - start;
    if (s >= min_sample_s || number >= (int64_t{1} << 20)) return number;
    // Jump close to the target, at most 16x at a time (the first runs may be cold).
    int64_t grow = s <= 0 ? 16 : static_cast<int64_t>(std::ceil(min_sample_s / s * 1.1));
    number *= std::clamp<int64_t>(grow, 2, 16);
  }
}

double Sample(const RunFn& run, int64_t number) {
  double start = Now();
  for (int64_t i = 0; i < number; ++i) run();
  return (Now() - start) / static_cast<double>(number);
}

// Inputs, reference output and the output buffer of one case. The kernel's buffers
// are the inputs in entry-point order followed by the output.
struct CaseData {
  std::vector<AlignedBuffer> inputs;
  AlignedBuffer output{0};
  std::vector<float> expected;
  Tolerance tolerance;
  std::vector<void*> pointers;  // inputs..., output
};

absl::StatusOr<std::unique_ptr<CaseData>> MakeCaseData(const TuningTask& task) {
  auto data = std::make_unique<CaseData>();
  std::vector<std::vector<float>> inputs = MakeInputs(task, /*seed=*/1);
  ASSIGN_OR_RETURN(data->expected, ReferenceOutput(task, inputs));
  for (const auto& in : inputs) {
    AlignedBuffer b(static_cast<int64_t>(in.size()));
    std::copy(in.begin(), in.end(), b.data.get());
    data->inputs.push_back(std::move(b));
  }
  data->output = AlignedBuffer(static_cast<int64_t>(data->expected.size()));
  data->tolerance = ToleranceFor(task);
  for (auto& b : data->inputs) data->pointers.push_back(b.data.get());
  data->pointers.push_back(data->output.data.get());
  return data;
}

// Runs once on a NaN-filled output and compares with the reference.
absl::Status CheckOutput(const RunFn& run, CaseData& data, const std::string& who) {
  std::fill_n(data.output.data.get(), data.output.size, std::nanf(""));
  run();
  int64_t bad = runtime::FirstMismatch(data.output.data.get(), data.expected.data(),
                                       data.output.size, data.tolerance.atol, data.tolerance.rtol);
  if (bad >= 0) {
    return absl::InternalError(who + ": wrong answer at index " + std::to_string(bad) + ": " +
                               std::to_string(data.output.data.get()[bad]) + " vs " +
                               std::to_string(data.expected[bad]));
  }
  return absl::OkStatus();
}

// The vendor library's call for the task, reading and writing `data`'s buffers.
absl::StatusOr<RunFn> VendorRun(const TuningTask& task, CaseData& data, int threads,
                                std::string* name) {
  if (task.op() == "matmul") {
    *name = "openblas";
    openblas_set_num_threads(threads);
    const int m = static_cast<int>(task.Param("M")), n = static_cast<int>(task.Param("N")),
              k = static_cast<int>(task.Param("K"));
    const float* a = data.inputs[0].data.get();
    const float* b = data.inputs[1].data.get();
    float* c = data.output.data.get();
    return RunFn([=] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b, n, 0.0f, c,
                  n);
    });
  }
  if (task.op() == "batch_matmul") {
    // OpenBLAS 0.3.21 has no batched sgemm: one call per matrix, as a user would.
    *name = "openblas";
    openblas_set_num_threads(threads);
    const int64_t batch = task.Param("B");
    const int m = static_cast<int>(task.Param("M")), n = static_cast<int>(task.Param("N")),
              k = static_cast<int>(task.Param("K"));
    const float* a = data.inputs[0].data.get();
    const float* b = data.inputs[1].data.get();
    float* c = data.output.data.get();
    return RunFn([=] {
      for (int64_t x = 0; x < batch; ++x)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a + x * m * k, k,
                    b + x * k * n, n, 0.0f, c + x * m * n, n);
    });
  }
  return absl::UnimplementedError("no vendor baseline for op " + task.op());
}

struct Candidate {
  Config config;
  std::unique_ptr<runtime::LoadedModule> module;
  double cost = std::numeric_limits<double>::infinity();  // seconds per run (tuning)
};

struct CaseResult {
  std::string task_text;
  std::string op;
  int threads = 1;
  std::string vendor;
  double tf_gflops = 0, vendor_gflops = 0;
  std::string best_config;
  int measured = 0, failed = 0;
  double median_build_ms = 0;
  double median_build_cpu_ms = 0;
  double tune_seconds = 0;
  std::vector<double> build_seconds;      // wall
  std::vector<double> build_cpu_seconds;  // CPU, see BuildCpuSeconds
};

// Tunes one case and times the winner against the vendor, alternating.
absl::StatusOr<CaseResult> RunCase(const TuningTask& task, CaseData& data, int threads,
                                   int trials, double min_sample_s, uint64_t seed) {
  CaseResult result;
  result.task_text = task.CanonicalText();
  result.op = task.op();
  result.threads = threads;
  double start = Now();

  Target target = DetectHostTarget("bench");
  target.num_threads = threads;
  ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(task));
  ConfigSpace space = tmpl->Space(task, target);
  std::vector<Config> configs = tmpl->Heuristics(task, target);
  std::set<std::string> seen;
  for (const Config& c : configs) seen.insert(c.ToJson());
  // Random search behind the SearchPolicy interface; the model-based policy can take
  // its place once it is merged (measured configs would then go to Observe()).
  std::unique_ptr<SearchPolicy> policy = std::make_unique<RandomPolicy>(space, seed);
  for (Config& c : policy->Propose(trials))
    if (seen.insert(c.ToJson()).second) configs.push_back(std::move(c));

  std::vector<Candidate> measured;
  double best = std::numeric_limits<double>::infinity();
  for (const Config& config : configs) {
    absl::StatusOr<ir::LoweredFunc> func = tmpl->Instantiate(task, target, config);
    if (!func.ok()) {
      ++result.failed;
      continue;
    }
    double cpu0 = BuildCpuSeconds();
    absl::StatusOr<Artifact> artifact = BuildArtifact(*func, target);
    double build_cpu = BuildCpuSeconds() - cpu0;
    if (!artifact.ok()) {
      TF_LOG(Warning) << "build failed for " << config.ToJson() << ": " << artifact.status();
      ++result.failed;
      continue;
    }
    result.build_seconds.push_back(artifact->build_seconds);
    result.build_cpu_seconds.push_back(build_cpu);
    std::string error;
    Candidate cand{config, runtime::LoadedModule::Load(artifact->shared_object,
                                                       artifact->entry_symbol, &error)};
    if (!cand.module) {
      TF_LOG(Warning) << "load failed: " << error;
      ++result.failed;
      continue;
    }
    runtime::LoadedModule* module = cand.module.get();
    void** buffers = data.pointers.data();
    RunFn run = [module, buffers] { module->Run(buffers); };
    double t0 = Now();
    absl::Status ok = CheckOutput(run, data, "tuneforge " + config.ToJson());
    double first = Now() - t0;
    if (!ok.ok()) {
      TF_LOG(Warning) << ok.message();
      ++result.failed;
      continue;
    }
    ++result.measured;
    if (first > 4 * best) {  // hopeless: one (warm-up) run is enough to tell
      cand.cost = first;
    } else {
      int64_t number = Calibrate(run, min_sample_s / 2);
      std::vector<double> samples;
      for (int r = 0; r < 3; ++r) samples.push_back(Sample(run, number));
      cand.cost = Median(samples);
    }
    best = std::min(best, cand.cost);
    measured.push_back(std::move(cand));
  }
  if (measured.empty()) return absl::InternalError("no valid kernel for " + result.task_text);

  // Top 3, re-measured interleaved: tuning samples are noisy.
  std::sort(measured.begin(), measured.end(),
            [](const Candidate& a, const Candidate& b) { return a.cost < b.cost; });
  measured.resize(std::min<size_t>(3, measured.size()));
  std::vector<RunFn> runs;
  std::vector<int64_t> numbers;
  for (Candidate& c : measured) {
    runtime::LoadedModule* module = c.module.get();
    void** buffers = data.pointers.data();
    runs.push_back([module, buffers] { module->Run(buffers); });
    numbers.push_back(Calibrate(runs.back(), min_sample_s / 2));
  }
  std::vector<std::vector<double>> samples(runs.size());
  for (int r = 0; r < 3; ++r)
    for (size_t i = 0; i < runs.size(); ++i) samples[i].push_back(Sample(runs[i], numbers[i]));
  size_t winner = 0;
  for (size_t i = 1; i < runs.size(); ++i)
    if (Median(samples[i]) < Median(samples[winner])) winner = i;
  result.best_config = measured[winner].config.ToJson();

  // The winner against the vendor, alternating samples.
  ASSIGN_OR_RETURN(RunFn vendor, VendorRun(task, data, threads, &result.vendor));
  RETURN_IF_ERROR(CheckOutput(vendor, data, result.vendor));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // see `quiet` below
  RETURN_IF_ERROR(CheckOutput(runs[winner], data, "tuneforge " + result.best_config));
  int64_t tf_number = Calibrate(runs[winner], min_sample_s);
  int64_t vendor_number = Calibrate(vendor, min_sample_s);
  std::vector<double> tf_samples, vendor_samples;
  // OpenBLAS's workers spin for a while after a call returns (up to ~2^28 cycles by
  // default) and would steal the second core from whatever runs next. Each side
  // keeps its own spinning within its sample; between samples both sides get a quiet
  // pause, so neither pays for the other's idle threads.
  auto quiet = [] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); };
  quiet();
  for (int r = 0; r < 5; ++r) {
    tf_samples.push_back(Sample(runs[winner], tf_number));
    quiet();
    vendor_samples.push_back(Sample(vendor, vendor_number));
    quiet();
  }
  double flops = task.Flops();
  result.tf_gflops = flops / Median(tf_samples) / 1e9;
  result.vendor_gflops = flops / Median(vendor_samples) / 1e9;
  result.median_build_ms = Median(result.build_seconds) * 1e3;
  result.median_build_cpu_ms = Median(result.build_cpu_seconds) * 1e3;
  result.tune_seconds = Now() - start;
  return result;
}

double GeoMean(const std::vector<double>& v) {
  double log_sum = 0;
  for (double x : v) log_sum += std::log(x);
  return v.empty() ? 0 : std::exp(log_sum / static_cast<double>(v.size()));
}

absl::StatusOr<std::vector<int>> ParseThreads(const std::string& text) {
  std::vector<int> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int t = 0;
    if (!absl::SimpleAtoi(part, &t) || t < 1 || t > 256)
      return absl::InvalidArgumentError("--threads must be a comma-separated list of thread "
                                        "counts in 1..256, got '" + text + "'");
    out.push_back(t);
  }
  return out;
}

}  // namespace

absl::StatusOr<int> BenchKernelsCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args,
                                             {"suite", "task", "trials", "threads",
                                              "min-sample-ms", "seed"},
                                             {"json", "help"}));
  if (flags.Has("help")) {
    std::fputs(kBenchKernelsUsage, stdout);
    return 0;
  }
  if (!flags.positional().empty())
    return absl::InvalidArgumentError("unexpected argument '" + flags.positional()[0] + "'");
  std::string suite_name = flags.Get("suite", "quick");
  const Suite* suite = nullptr;
  for (const Suite& s : Suites())
    if (s.name == suite_name) suite = &s;
  if (suite == nullptr)
    return absl::InvalidArgumentError("unknown suite '" + suite_name +
                                      "' (known: smoke, quick, full)");
  std::vector<std::string> task_texts = suite->tasks;
  if (flags.Has("task")) task_texts = {flags.Get("task")};
  ASSIGN_OR_RETURN(int64_t trials, flags.GetInt("trials", suite->trials, 0, 100000));
  ASSIGN_OR_RETURN(int64_t min_ms, flags.GetInt("min-sample-ms",
                                                static_cast<int64_t>(suite->min_sample_ms), 1,
                                                10000));
  ASSIGN_OR_RETURN(int64_t seed, flags.GetInt("seed", 1, 0, std::numeric_limits<int64_t>::max()));
  ASSIGN_OR_RETURN(std::vector<int> threads, ParseThreads(flags.Get("threads", "1,2")));

  std::vector<TuningTask> tasks;
  for (const std::string& text : task_texts) {
    ASSIGN_OR_RETURN(TuningTask task, ParseTask(text));
    RETURN_IF_ERROR(FindTemplate(task).status());
    tasks.push_back(std::move(task));
  }

  std::vector<CaseResult> results;
  for (const TuningTask& task : tasks) {
    TF_LOG(Info) << "bench: " << task.CanonicalText() << ": computing the reference";
    ASSIGN_OR_RETURN(std::unique_ptr<CaseData> data, MakeCaseData(task));
    for (int t : threads) {
      TF_LOG(Info) << "bench: " << task.CanonicalText() << ", " << t << " thread(s): tuning";
      ASSIGN_OR_RETURN(CaseResult r, RunCase(task, *data, t, static_cast<int>(trials),
                                             static_cast<double>(min_ms) / 1e3,
                                             static_cast<uint64_t>(seed)));
      TF_LOG(Info) << "bench: " << r.task_text << " t" << t << ": tuneforge " << r.tf_gflops
                   << " GFLOP/s, " << r.vendor << " " << r.vendor_gflops << " GFLOP/s";
      results.push_back(std::move(r));
    }
  }

  // Geometric mean of the ratios per (op, threads).
  std::map<std::pair<std::string, int>, std::vector<double>> ratios;
  std::vector<double> all_builds, all_builds_cpu;
  for (const CaseResult& r : results) {
    ratios[{r.op, r.threads}].push_back(r.tf_gflops / r.vendor_gflops);
    all_builds.insert(all_builds.end(), r.build_seconds.begin(), r.build_seconds.end());
    all_builds_cpu.insert(all_builds_cpu.end(), r.build_cpu_seconds.begin(),
                          r.build_cpu_seconds.end());
  }
  double median_build_ms = Median(all_builds) * 1e3;
  double median_build_cpu_ms = Median(all_builds_cpu) * 1e3;

  if (flags.Has("json")) {
    json out = {{"suite", flags.Has("task") ? "custom" : suite->name},
                {"trials", trials},
                {"min_sample_ms", min_ms},
                {"median_build_ms", median_build_ms},
                {"median_build_cpu_ms", median_build_cpu_ms},
                {"cases", json::array()},
                {"geomean", json::array()}};
    for (const CaseResult& r : results) {
      out["cases"].push_back({{"task", r.task_text},
                              {"op", r.op},
                              {"threads", r.threads},
                              {"vendor", r.vendor},
                              {"tuneforge_gflops", r.tf_gflops},
                              {"vendor_gflops", r.vendor_gflops},
                              {"ratio", r.tf_gflops / r.vendor_gflops},
                              {"best_config", json::parse(r.best_config)},
                              {"measured", r.measured},
                              {"failed", r.failed},
                              {"median_build_ms", r.median_build_ms},
                              {"median_build_cpu_ms", r.median_build_cpu_ms},
                              {"seconds", r.tune_seconds}});
    }
    for (const auto& [key, v] : ratios)
      out["geomean"].push_back({{"op", key.first}, {"threads", key.second}, {"ratio", GeoMean(v)},
                                {"cases", v.size()}});
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }

  std::printf("%-44s %3s %10s %10s %6s %9s %9s\n", "case", "thr", "tuneforge", "vendor", "ratio",
              "build ms", "build ms");
  std::printf("%-44s %3s %10s %10s %6s %9s %9s\n", "", "", "GFLOP/s", "GFLOP/s", "", "wall", "cpu");
  for (const CaseResult& r : results) {
    std::string text = r.task_text.substr(0, r.task_text.find(" dtype="));
    std::printf("%-44s %3d %10.1f %10.1f %6.2f %9.1f %9.1f\n", text.c_str(), r.threads,
                r.tf_gflops, r.vendor_gflops, r.tf_gflops / r.vendor_gflops, r.median_build_ms,
                r.median_build_cpu_ms);
  }
  std::printf("\ngeometric mean of tuneforge / vendor:\n");
  for (const auto& [key, v] : ratios)
    std::printf("  %-12s %d thread(s): %.2f  (%zu cases)\n", key.first.c_str(), key.second,
                GeoMean(v), v.size());
  std::printf("median build per candidate (LLVM + link): %.1f ms wall, %.1f ms CPU (%zu builds);"
              " trials %lld + heuristics\n",
              median_build_ms, median_build_cpu_ms, all_builds.size(),
              static_cast<long long>(trials));
  return 0;
}

}  // namespace tuneforge::cli
