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
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/bench.h"
#include "tuner/model_timing.h"
#include "cli/flags.h"
#include "compiler/codegen/build.h"
#include "compiler/frontend/onnx_reader.h"
#include "compiler/graph/executor.h"
#include "compiler/graph/graph.h"
#include "compiler/graph/tasks.h"
#include "compiler/task/task.h"
#include "compiler/support/files.h"
#include "compiler/support/stats.h"
#include "compiler/support/status.h"
#include "db/database.h"
#include "deploy/model_library.h"
#include "nlohmann/json.hpp"

namespace tuneforge::cli {
namespace {

constexpr const char* kUsage =
    "usage: tuneforge bench model M.onnx [--threads 1,2] [--runs N] [--rounds R]\n"
    "                             [--db F] [--python PY] [--json] [--profile] [--profile-steps]\n"
    "                             [--weight-prefetch BYTES] [--dim NAME=N,...] [--shape INPUT=D0,D1,...]\n"
    "  Latency of one inference (median and minimum of --runs, default 30, after a\n"
    "  warm-up) with the same threads, in --rounds (default 3) alternating blocks, of:\n"
    "  tuneforge's executor untuned (default schedules) and tuned (--db: each task's\n"
    "  best record for this machine), onnxruntime, and the library `deploy --model`\n"
    "  makes of the tuned (else untuned) executor, run through its C API by\n"
    "  deploy/examples/model_example.c; the ratio onnxruntime / ours. With --db also\n"
    "  the trials and job time spent tuning the model's tasks. --python: the Python\n"
    "  with onnxruntime (default: $TUNEFORGE_PYTHON, else the project's .venv).\n"
    "  --profile: also print where our time goes, per kernel (the 15 largest).\n"
    "  --profile-steps: also print every step's time in the order the model runs them,\n"
    "      and beside it the step's time repeated alone (its data hot in cache).\n"
    "  --weight-prefetch BYTES: convolutions with at least this many bytes of weights\n"
    "      prefetch their next weight block as they compute (default 1048576; 0: none).\n"
    "      The library is deployed with the default.\n"
    "  --dim, --shape (repeatable): sizes of the model's symbolic input dimensions, as\n"
    "      for `model run`; onnxruntime gets inputs of the same bound shapes.\n";

using Clock = std::chrono::steady_clock;

struct Timing {
  std::vector<double> samples_ms;
  double median() const { return MedianOr(samples_ms, 0); }
  double min() const { return samples_ms.empty() ? 0 : *std::min_element(samples_ms.begin(), samples_ms.end()); }
};

// `runs` inferences of onnxruntime in a child Python process.
// `shapes`: each graph input's shape as the executor runs it (symbolic dimensions
// bound), so onnxruntime's inputs match.
absl::StatusOr<std::vector<double>> TimeOnnxRuntime(const std::string& python, const std::string& model,
                                                    const std::vector<std::string>& shapes, int threads, int runs,
                                                    std::string* version) {
  ASSIGN_OR_RETURN(TempDir dir, TempDir::Create("tuneforge-bench-model"));
  const std::string log = dir.File("ort.log");
  const std::string script = std::string(TF_SOURCE_DIR) + "/bench/ort_time.py";
  std::vector<std::string> args = {python, script, model, "--threads", std::to_string(threads), "--runs",
                                   std::to_string(runs)};
  for (const std::string& shape : shapes) {
    args.push_back("--shape");
    args.push_back(shape);
  }
  RETURN_IF_ERROR(RunChecked(args, log));
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


// The model's tuning in the db: distinct configs measured for its tasks on `target`,
// and the time of the jobs that measured them (per job, its first record's start to
// its last record's end: building and measuring, not the job's queueing).
absl::StatusOr<nlohmann::json> TuningSummary(Database* db, const graph::TaskTable& table, const Target& target) {
  int trials = 0, with_records = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> jobs;  // job -> (first start, last end)
  for (const graph::ExtractedTask& t : table.tasks) {
    ASSIGN_OR_RETURN(TuningTask task, ParseTask(t.task));
    ASSIGN_OR_RETURN(std::vector<TuningRecord> records, db->Records(task.WorkloadKey(), target.Key()));
    // As `tune` counts trials: distinct configs, the untuned baseline not one of them.
    ASSIGN_OR_RETURN(const Template* tmpl, FindTemplate(task));
    const std::string naive = tmpl->Naive(task, target).ToJson();
    std::set<std::string> configs;
    for (const TuningRecord& r : records) {
      if (r.config_json != naive) configs.insert(r.config_json);
      if (r.job_id.empty() || r.result.start_unix_us <= 0 || r.result.end_unix_us < r.result.start_unix_us) continue;
      auto [it, inserted] = jobs.emplace(r.job_id, std::make_pair(r.result.start_unix_us, r.result.end_unix_us));
      if (!inserted) {
        it->second.first = std::min(it->second.first, r.result.start_unix_us);
        it->second.second = std::max(it->second.second, r.result.end_unix_us);
      }
    }
    trials += static_cast<int>(configs.size());
    with_records += !configs.empty();
  }
  double job_seconds = 0;
  for (const auto& [id, span] : jobs) job_seconds += static_cast<double>(span.second - span.first) * 1e-6;
  return nlohmann::json{{"trials", trials},
                        {"tasks", table.tasks.size()},
                        {"tasks_with_records", with_records},
                        {"jobs", jobs.size()},
                        {"job_seconds", job_seconds},
                        {"threads", target.num_threads}};
}

// Deploys `exec` (before it ran) into `dir` and builds the C example against it;
// returns the example's path.
absl::StatusOr<std::string> BuildLibrary(const graph::Executor& exec, const Target& target, const std::string& dir) {
  ASSIGN_OR_RETURN(graph::ExportedModel exported, exec.Export());
  ModelDeployOptions o;
  o.out_dir = dir;
  o.tuneforge_version = "bench";
  o.provenance_json = R"({"model": "bench model"})";
  ASSIGN_OR_RETURN(ModelDeployReport r, DeployModel(exported, target, o));
  const std::string example = dir + "/model_example";
  RETURN_IF_ERROR(RunChecked({"cc", "-std=c11", "-O2", std::string(TF_SOURCE_DIR) + "/deploy/examples/model_example.c",
                              "-I", dir, "-L", dir, "-ltuneforge_model", "-Wl,-rpath," + dir, "-o", example},
                             dir + "/cc.log"));
  return example;
}

// `runs` inferences of the deployed library in its example program (after one).
absl::StatusOr<std::vector<double>> TimeLibrary(const std::string& example, const std::string& dir, int runs) {
  const std::string log = dir + "/run.log";
  RETURN_IF_ERROR(RunChecked({example, dir, "--runs", std::to_string(runs), "--samples"}, log));
  ASSIGN_OR_RETURN(std::string out, ReadFile(log));
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("samples_ms:", 0) != 0) continue;
    std::istringstream values(line.substr(11));
    std::vector<double> samples;
    for (double v; values >> v;) samples.push_back(v);
    if (static_cast<int>(samples.size()) == runs) return samples;
  }
  return absl::InternalError("the library's example printed no samples: " + out);
}

}  // namespace

absl::StatusOr<int> BenchModelCommand(const std::vector<std::string>& args) {
  ASSIGN_OR_RETURN(Flags flags,
                   Flags::Parse(args, {"threads", "runs", "rounds", "db", "python", "weight-prefetch", "dim", "shape"},
                                {"json", "help", "profile", "profile-steps"}, {"dim", "shape"}));
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
  graph::ExecutorOptions defaults;
  ASSIGN_OR_RETURN(defaults.prefetch_weight_bytes,
                   flags.GetInt("weight-prefetch", defaults.prefetch_weight_bytes, 0, int64_t{1} << 40));
  const char* env_python = std::getenv("TUNEFORGE_PYTHON");
  const std::string python = flags.Get("python", env_python && *env_python ? env_python : TF_DEFAULT_PYTHON);
  if (!std::filesystem::exists(python)) {
    return absl::FailedPreconditionError("no Python at " + python +
                                         " for onnxruntime: run scripts/install-python-deps or pass --python");
  }
  const bool json = flags.Has("json");

  const Clock::time_point import_start = Clock::now();
  frontend::DimBindings dims;
  for (const std::string& v : flags.GetAll("dim")) RETURN_IF_ERROR(frontend::ParseDimBinding(v, &dims));
  for (const std::string& v : flags.GetAll("shape")) RETURN_IF_ERROR(frontend::ParseShapeBinding(v, &dims));
  ASSIGN_OR_RETURN(frontend::OnnxModel model, frontend::ReadOnnxModel(path));
  RETURN_IF_ERROR(frontend::BindDimensions(&model, dims));
  RETURN_IF_ERROR(frontend::CheckSupported(model));
  ASSIGN_OR_RETURN(graph::Graph g, graph::ImportOnnx(model));
  std::vector<std::string> input_shapes;  // NAME=D0,D1,... for onnxruntime
  for (int id : g.inputs) {
    const graph::Tensor& t = g.tensors[static_cast<size_t>(id)];
    input_shapes.push_back(t.name + "=" + absl::StrJoin(t.shape, ","));
  }
  const double import_seconds = std::chrono::duration<double>(Clock::now() - import_start).count();

  std::unique_ptr<Database> db;
  if (flags.Has("db")) {
    ASSIGN_OR_RETURN(db, OpenDbReadOnly(flags.Get("db")));
  }

  nlohmann::json report = {{"model", path}, {"import_seconds", import_seconds}, {"results", nlohmann::json::array()}};
  ASSIGN_OR_RETURN(graph::TaskTable table, graph::ExtractTasks(g));
  if (db) {
    Target host = DetectHostTarget("local");
    ASSIGN_OR_RETURN(report["tuning"], TuningSummary(db.get(), table, host));
  }
  if (!json) {
    std::printf("model: %s (imported in %.2f s)%s\n", path.c_str(), import_seconds,
                db ? ", tuned: the db's best records" : "; no --db: nothing tuned");
    if (db) {
      const nlohmann::json& t = report["tuning"];
      std::printf("tuning: %d trials over %d of %d tasks in the db for this machine (%d threads), %.0f s of "
                  "tuning jobs\n",
                  t["trials"].get<int>(), t["tasks_with_records"].get<int>(), t["tasks"].get<int>(),
                  t["threads"].get<int>(), t["job_seconds"].get<double>());
    }
    std::printf("%7s %9s %13s %13s %13s %13s %9s\n", "threads", "compile s", "untuned ms", "tuned ms",
                "ort ms", "library ms", "ort/ours");
  }
  ASSIGN_OR_RETURN(TempDir work, TempDir::Create("tuneforge-bench-model"));
  for (int threads : thread_counts) {
    Target target = DetectHostTarget("local");
    target.num_threads = threads;
    ASSIGN_OR_RETURN(std::unique_ptr<graph::Executor> untuned, graph::Executor::Create(g, target, defaults));
    std::unique_ptr<graph::Executor> tuned;
    if (db) {
      graph::ExecutorOptions options = defaults;
      options.schedule = BestRecordSchedule(db.get(), &target);
      ASSIGN_OR_RETURN(tuned, graph::Executor::Create(g, target, options));
    }
    graph::Executor* ours = tuned ? tuned.get() : untuned.get();
    // The library: what `deploy --model` makes of the same executor, run out of
    // process by deploy/examples/model_example.c through the C API.
    // A model the library cannot take (int64 inputs: token ids) is timed without it.
    const std::string lib = work.File("lib" + std::to_string(threads));
    absl::StatusOr<std::string> example = BuildLibrary(*ours, target, lib);
    if (!example.ok() && !absl::IsUnimplemented(example.status())) return example.status();
    if (!example.ok() && !json) std::fprintf(stderr, "no library: %s\n", std::string(example.status().message()).c_str());

    const graph::RunBuffers io = graph::SeededRunBuffers(*ours, 1);
    const std::vector<const float*>& in_ptrs = io.input_ptrs;
    const std::vector<float*>& out_ptrs = io.output_ptrs;
    for (graph::Executor* e : {untuned.get(), tuned.get()}) {
      if (!e) continue;
      for (int i = 0; i < 3; ++i) RETURN_IF_ERROR(e->Run(in_ptrs, out_ptrs));  // warm-up
    }
    auto time_executor = [&](graph::Executor* e, int n, Timing* t) -> absl::Status {
      for (int i = 0; i < n; ++i) {
        const Clock::time_point start = Clock::now();
        RETURN_IF_ERROR(e->Run(in_ptrs, out_ptrs));
        t->samples_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      }
      return absl::OkStatus();
    };
    Timing t_untuned, t_tuned, ort, library;
    std::string version;
    const int per_round = static_cast<int>(std::max<int64_t>(1, runs / rounds));
    for (int64_t r = 0; r < rounds; ++r) {
      RETURN_IF_ERROR(time_executor(untuned.get(), per_round, &t_untuned));
      if (tuned) RETURN_IF_ERROR(time_executor(tuned.get(), per_round, &t_tuned));
      ASSIGN_OR_RETURN(std::vector<double> s, TimeOnnxRuntime(python, path, input_shapes, threads, per_round, &version));
      ort.samples_ms.insert(ort.samples_ms.end(), s.begin(), s.end());
      if (example.ok()) {
        ASSIGN_OR_RETURN(std::vector<double> l, TimeLibrary(*example, lib, per_round));
        library.samples_ms.insert(library.samples_ms.end(), l.begin(), l.end());
      }
    }
    if (flags.Has("profile") || flags.Has("profile-steps")) {
      std::vector<double> step_ms;
      for (int i = 0; i < per_round; ++i) RETURN_IF_ERROR(ours->RunProfiled(in_ptrs, out_ptrs, &step_ms));
      std::vector<std::string> sources = ours->steps();
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
      std::fprintf(json ? stderr : stdout, "profile (%s) at %d threads: %.2f ms in %zu steps\n",
                   tuned ? "tuned" : "untuned", threads, total, step_ms.size());
      for (size_t i = 0; i < std::min<size_t>(15, rows.size()); ++i) {
        std::fprintf(json ? stderr : stdout, "  %8.3f ms %5.1f%%  %s\n", rows[i].first, 100 * rows[i].first / total,
                     rows[i].second.c_str());
      }
      if (flags.Has("profile-steps")) {
        // Beside each step's time in the run, its time repeated alone (data hot in
        // cache, as a kernel measured alone): where they differ, the model's context
        // (cold weights, a cold input) costs the difference.
        std::fprintf(json ? stderr : stdout, "steps in run order:   in run   repeated alone\n");
        double hot_total = 0;
        for (size_t i = 0; i < step_ms.size(); ++i) {
          ASSIGN_OR_RETURN(const double hot, ours->TimeStepHot(i, 10));
          hot_total += hot;
          std::fprintf(json ? stderr : stdout, "  %3zu %8.3f ms %8.3f ms  %s\n", i, step_ms[i] / per_round, hot,
                       sources[i].c_str());
        }
        std::fprintf(json ? stderr : stdout, "  sum  %8.3f ms %8.3f ms\n", total, hot_total);
        RETURN_IF_ERROR(ours->Run(in_ptrs, out_ptrs));  // the repeats left the arena as they left it
      }
    }
    for (const graph::Executor* e : {untuned.get(), tuned.get()}) {
      if (e && e->thread_shortfall().first > 0)
        std::fprintf(stderr, "warning: a parallel loop asked for %d threads and got %d (the system refused more): "
                             "this row's times are not at %d threads\n",
                     e->thread_shortfall().first, e->thread_shortfall().second, threads);
    }
    const Timing& best_ours = tuned ? t_tuned : t_untuned;
    const double ratio = ort.median() / best_ours.median();
    // Every sample too, in the order taken (rounds one after another): a shared
    // host's bursts show as runs of slow samples.
    auto engine = [](const Timing& t) {
      return nlohmann::json{{"median_ms", t.median()}, {"min_ms", t.min()}, {"samples_ms", t.samples_ms}};
    };
    nlohmann::json engines = {{"untuned", engine(t_untuned)}, {"onnxruntime", engine(ort)}};
    if (example.ok()) engines["library"] = engine(library);
    engines["onnxruntime"]["version"] = version;
    if (tuned) engines["tuned"] = engine(t_tuned);
    report["results"].push_back({{"threads", threads},
                                 {"compile_seconds", ours->compile_seconds()},
                                 {"thread_shortfall", {ours->thread_shortfall().first, ours->thread_shortfall().second}},
                                 {"kernels", ours->kernels().size()},
                                 {"tuned_tasks", ours->tuned_tasks()},
                                 {"default_tasks", ours->default_tasks()},
                                 {"arena_bytes", ours->arena_bytes()},
                                 {"engines", engines},
                                 {"ort_over_ours", ratio}});
    if (!json) {
      std::printf("%7d %9.2f %13.3f %13s %13.3f %13s %8.2fx\n", threads, ours->compile_seconds(),
                  t_untuned.median(), tuned ? absl::StrCat(absl::SixDigits(t_tuned.median())).c_str() : "-",
                  ort.median(), example.ok() ? absl::StrFormat("%.3f", library.median()).c_str() : "-", ratio);
    }
  }
  if (json) {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    std::printf("medians of %lld runs in %lld rounds; ort/ours > 1: tuneforge (%s) is faster; onnxruntime %s; "
                "library: the deployed model through its C API (deploy/examples/model_example.c)\n",
                static_cast<long long>(runs), static_cast<long long>(rounds), db ? "tuned" : "untuned",
                report["results"].empty()
                    ? ""
                    : report["results"][0]["engines"]["onnxruntime"]["version"].get<std::string>().c_str());
  }
  return 0;
}

}  // namespace tuneforge::cli
