// `tuneforge bench model M.onnx`: end-to-end latency of a whole model on the graph
// executor (default schedules, or the db's best records with --db) next to
// onnxruntime with the same thread count, measured in the same run. onnxruntime runs
// in the project's Python environment (bench/ort_time.py, its CPU provider with all
// graph optimizations), in rounds alternating with ours, so both see the same
// machine. Figures are printed, never asserted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench.h"
#include "cli/best_schedule.h"
#include "cli/flags.h"
#include "compiler/codegen/build.h"
#include "compiler/frontend/onnx_reader.h"
#include "compiler/graph/executor.h"
#include "compiler/graph/graph.h"
#include "compiler/support/files.h"
#include "compiler/support/status.h"
#include "db/database.h"
#include "nlohmann/json.hpp"

namespace tuneforge::cli {
namespace {

constexpr const char* kUsage =
    "usage: tuneforge bench model M.onnx [--threads 1,2] [--runs N] [--rounds R]\n"
    "                             [--db F] [--python PY] [--json]\n"
    "  Latency of one inference (median and minimum of --runs, default 30, after a\n"
    "  warm-up) on tuneforge's executor and on onnxruntime with the same threads, in\n"
    "  --rounds (default 3) alternating blocks, and the ratio. Also the import and\n"
    "  compile time. --db: run the tasks with the db's best records for this machine\n"
    "  (default: the templates' default schedules). --python: the Python with\n"
    "  onnxruntime (default: $TUNEFORGE_PYTHON, else the project's .venv).\n"
    "  --profile: also print where our time goes, per kernel (the 15 largest).\n";

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Timing {
  std::vector<double> samples_ms;
  double median() const { return Median(samples_ms); }
  double min() const { return samples_ms.empty() ? 0 : *std::min_element(samples_ms.begin(), samples_ms.end()); }
};

// `runs` inferences of onnxruntime in a child Python process.
absl::StatusOr<std::vector<double>> TimeOnnxRuntime(const std::string& python, const std::string& model,
                                                    int threads, int runs, std::string* version) {
  ASSIGN_OR_RETURN(TempDir dir, TempDir::Create("tuneforge-bench-model"));
  const std::string log = dir.File("ort.log");
  const std::string script = std::string(TF_SOURCE_DIR) + "/bench/ort_time.py";
  RETURN_IF_ERROR(RunChecked({python, script, model, "--threads", std::to_string(threads), "--runs",
                              std::to_string(runs)},
                             log));
  ASSIGN_OR_RETURN(std::string out, ReadFile(log));
  // The last line that is a JSON object (onnxruntime may log to stderr before it).
  std::istringstream lines(out);
  std::string line, json_line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line[0] == '{') json_line = line;
  }
  nlohmann::json j = nlohmann::json::parse(json_line, nullptr, false);
  if (j.is_discarded() || !j.contains("samples_ms")) {
    return absl::InternalError("onnxruntime timing printed no result: " + out);
  }
  *version = j.value("version", "");
  return j["samples_ms"].get<std::vector<double>>();
}

}  // namespace

absl::StatusOr<int> BenchModelCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags, Flags::Parse(args, {"threads", "runs", "rounds", "db", "python"},
                                             {"json", "help", "profile"}));
  if (flags.Has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (flags.positional().size() != 1) {
    return absl::InvalidArgumentError("bench model needs exactly one model file (see --help)");
  }
  const std::string path = flags.positional()[0];
  ASSIGN_OR_RETURN(std::vector<int> thread_counts, ParseThreadList(flags.Get("threads", "1,2")));
  ASSIGN_OR_RETURN(int64_t runs, flags.GetInt("runs", 30, 1, 100000));
  ASSIGN_OR_RETURN(int64_t rounds, flags.GetInt("rounds", 3, 1, 100));
  const char* env_python = std::getenv("TUNEFORGE_PYTHON");
  const std::string python = flags.Get("python", env_python && *env_python ? env_python : TF_DEFAULT_PYTHON);
  if (!std::filesystem::exists(python)) {
    return absl::FailedPreconditionError("no Python at " + python +
                                         " for onnxruntime: run scripts/install-python-deps or pass --python");
  }
  const bool json = flags.Has("json");

  const Clock::time_point import_start = Clock::now();
  ASSIGN_OR_RETURN(frontend::OnnxModel model, frontend::ReadOnnxModel(path));
  RETURN_IF_ERROR(frontend::CheckSupported(model));
  ASSIGN_OR_RETURN(graph::Graph g, graph::ImportOnnx(model));
  const double import_seconds = std::chrono::duration<double>(Clock::now() - import_start).count();

  std::unique_ptr<Database> db;
  if (flags.Has("db")) {
    ASSIGN_OR_RETURN(db, OpenDbReadOnly(flags.Get("db")));
  }

  nlohmann::json report = {{"model", path}, {"import_seconds", import_seconds}, {"results", nlohmann::json::array()}};
  if (!json) {
    std::printf("model: %s (imported in %.2f s)%s\n", path.c_str(), import_seconds,
                db ? ", tasks from the db's best records" : ", default schedules");
    std::printf("%7s %11s %13s %13s %13s %13s %9s\n", "threads", "compile s", "ours med ms", "ours min ms",
                "ort med ms", "ort min ms", "ort/ours");
  }
  for (int threads : thread_counts) {
    Target target = DetectHostTarget("local");
    target.num_threads = threads;
    graph::ExecutorOptions options;
    if (db) options.schedule = BestRecordSchedule(db.get(), &target);
    ASSIGN_OR_RETURN(std::unique_ptr<graph::Executor> exec, graph::Executor::Create(g, target, options));
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1, 1);
    std::vector<std::vector<float>> inputs, outputs;
    std::vector<const float*> in_ptrs;
    std::vector<float*> out_ptrs;
    for (const graph::TensorInfo& t : exec->inputs()) {
      inputs.emplace_back(static_cast<size_t>(t.NumElements()));
      for (float& v : inputs.back()) v = dist(rng);
      in_ptrs.push_back(inputs.back().data());
    }
    for (const graph::TensorInfo& t : exec->outputs()) {
      outputs.emplace_back(static_cast<size_t>(t.NumElements()));
      out_ptrs.push_back(outputs.back().data());
    }
    for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(exec->Run(in_ptrs, out_ptrs));  // warm-up
    Timing ours, ort;
    std::string version;
    const int per_round = static_cast<int>(std::max<int64_t>(1, runs / rounds));
    for (int64_t r = 0; r < rounds; ++r) {
      for (int i = 0; i < per_round; ++i) {
        const Clock::time_point start = Clock::now();
        RETURN_IF_ERROR(exec->Run(in_ptrs, out_ptrs));
        ours.samples_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      }
      ASSIGN_OR_RETURN(std::vector<double> s, TimeOnnxRuntime(python, path, threads, per_round, &version));
      ort.samples_ms.insert(ort.samples_ms.end(), s.begin(), s.end());
    }
    if (flags.Has("profile")) {
      std::vector<double> step_ms;
      for (int i = 0; i < per_round; ++i) RETURN_IF_ERROR(exec->RunProfiled(in_ptrs, out_ptrs, &step_ms));
      std::vector<std::string> sources = exec->steps();
      std::map<std::string, std::pair<double, int>> by_source;
      double total = 0;
      for (size_t i = 0; i < step_ms.size(); ++i) {
        by_source[sources[i]].first += step_ms[i] / per_round;
        by_source[sources[i]].second += 1;
        total += step_ms[i] / per_round;
      }
      std::vector<std::pair<double, std::string>> rows;
      for (const auto& [src, v] : by_source) rows.push_back({v.first, absl::StrCat(src, " (x", v.second, ")")});
      std::sort(rows.rbegin(), rows.rend());
      std::fprintf(json ? stderr : stdout, "profile at %d threads: %.2f ms in %zu steps\n", threads, total,
                   step_ms.size());
      for (size_t i = 0; i < std::min<size_t>(15, rows.size()); ++i) {
        std::fprintf(json ? stderr : stdout, "  %8.3f ms %5.1f%%  %s\n", rows[i].first, 100 * rows[i].first / total,
                     rows[i].second.c_str());
      }
    }
    const double ratio = ort.median() / ours.median();
    report["results"].push_back({{"threads", threads},
                                 {"compile_seconds", exec->compile_seconds()},
                                 {"kernels", exec->kernels().size()},
                                 {"tuned_tasks", exec->tuned_tasks()},
                                 {"default_tasks", exec->default_tasks()},
                                 {"arena_bytes", exec->arena_bytes()},
                                 {"engines",
                                  {{"tuneforge", {{"median_ms", ours.median()}, {"min_ms", ours.min()}}},
                                   {"onnxruntime", {{"median_ms", ort.median()}, {"min_ms", ort.min()}, {"version", version}}}}},
                                 {"ort_over_ours", ratio}});
    if (!json) {
      std::printf("%7d %11.2f %13.2f %13.2f %13.2f %13.2f %8.2fx\n", threads, exec->compile_seconds(),
                  ours.median(), ours.min(), ort.median(), ort.min(), ratio);
    }
  }
  if (json) {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    std::printf("ort/ours > 1: tuneforge is faster; onnxruntime %s, %lld runs each in %lld rounds\n",
                report["results"].empty() ? "" : report["results"][0]["engines"]["onnxruntime"]["version"].get<std::string>().c_str(),
                static_cast<long long>(runs), static_cast<long long>(rounds));
  }
  return 0;
}

}  // namespace tuneforge::cli
